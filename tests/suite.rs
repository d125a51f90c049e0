//! The integration tests, one binary (`cargo test --test suite`): each tests/FILE.rs is a module
//! here, so its tests are named `FILE::TEST` (`cargo test --test suite -- --ignored --exact
//! faults::fault_suite`). One binary instead of one per file: each linked the library and
//! compiled tests/common again, about half of the test build's CPU time.

mod common;

mod agent_boot;
mod architecture;
mod cloud_preset;
mod compare_ab;
mod compare_html;
mod compare_recommend;
mod compare_verdicts;
mod compare_within;
mod deb_package;
mod doctor;
mod domain_xml;
mod faults;
mod faults_diskfull;
mod faults_hostile;
mod faults_libvirtd;
mod faults_stall;
mod guest_hostdir;
mod guest_layouts;
mod hand_guest;
mod harness_selftest;
mod host2;
mod host_rows;
mod image_build;
mod image_modules;
mod instance_disks;
mod iscsi_chap;
mod matrix_backends;
mod matrix_hosts;
mod matrix_lifecycle;
mod matrix_links;
mod matrix_local;
mod matrix_remote_storage;
mod matrix_sweeps;
mod matrix_workloads;
mod matrix_xen;
mod nightly;
mod rbd_external;
mod recommend_real;
mod report_html;
mod report_openmetrics;
mod report_parsers;
mod report_seed;
mod report_tables;
mod results_cli;
mod security_closed;
mod seed_presets;
mod soak;
mod storage_pools;
mod storage_servers;
mod store_crash;
mod store_roundtrip;
mod tgt_ipc;
mod trend_month;
mod trend_nights;
