//! The command line: clap definitions, and how CLI flags override the TOML configuration.

use crate::cell::{parse_list, Hypervisor};
use crate::error::CliError;
use crate::matrix::config::MatrixConfig;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// vmbench: benchmark storage as a virtual machine sees it.
#[derive(Debug, Parser)]
#[command(name = "vmbench", version = crate::VERSION, about, long_about = None, args_override_self = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a benchmark matrix (hypervisor x backend x format x bus x cache/io x workload).
    Matrix(Box<MatrixArgs>),
    /// Build or inspect the guest image.
    Image {
        /// What to do with the image.
        #[command(subcommand)]
        action: ImageAction,
    },
    /// Show what this host can run, and why not.
    Doctor(DoctorArgs),
    /// Remove domains, volumes, LUNs, exports and servers a crashed run left behind.
    Cleanup(CleanupArgs),
    /// List the runs in the history store.
    Runs(DbArgs),
    /// Report a run: terminal tables, Markdown, CSV or a self-contained HTML file.
    Report(ReportArgs),
    /// Compare two runs: per cell and fact, change, adjusted significance and a verdict
    /// (exit 0 no regression shown, 1 regression or broken cell, 3 not proven, 2 bad input,
    /// 4 no baseline yet).
    Compare(CompareArgs),
    /// Change points over the nightly history of every cell x headline metric; with --gate,
    /// decide tonight by them (exit 0 no new regression, 1 regression or broken cell, 3 not
    /// enough nights yet, 2 bad input).
    Trend(TrendArgs),
    /// Rank the measured cells of a run, with 95% intervals over the repeats (exit 0 ranked;
    /// 3 cannot rank: fewer than 3 passed repeats per cell, or nothing measured to rank on;
    /// 2 bad input).
    Recommend(RecommendArgs),
    /// Export a run as JSON (to move results between hosts) or OpenMetrics (for dashboards).
    Export(ExportArgs),
    /// Import a run exported as JSON.
    Import(ImportArgs),
    /// List the seed presets (`vmbench matrix --preset NAME`), one line each.
    Presets,
}

/// `vmbench image` actions.
#[derive(Debug, Subcommand)]
pub enum ImageAction {
    /// Build the guest image (kernel + initramfs with the agent, fio, bonnie++) if any input
    /// changed, and print its identity, size and versions.
    Build(ImageArgs),
    /// Remove old images from the cache: keeps the --keep most recently used ones and any
    /// image a live run uses; the downloaded packages and fio build (build inputs) stay.
    Prune(PruneArgs),
}

/// `vmbench image prune`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Image cache directory (content-addressed).
    #[arg(long, env = "VMBENCH_IMAGE_CACHE")]
    pub image_cache: Option<PathBuf>,
    /// How many of the most recently used images to keep (at least 1).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: u64,
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Where the image lives and how it is made.
#[derive(Debug, Clone, Args)]
pub struct ImageArgs {
    /// Image cache directory (content-addressed).
    #[arg(long, env = "VMBENCH_IMAGE_CACHE")]
    pub image_cache: Option<PathBuf>,
    /// Use this static agent binary instead of building it.
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// Rebuild the image even when the cache is warm.
    #[arg(long)]
    pub rebuild: bool,
}

/// The history database.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// SQLite history database.
    #[arg(long, env = "VMBENCH_DB")]
    pub db: Option<PathBuf>,
}

/// `vmbench matrix`.
#[derive(Debug, Args)]
pub struct MatrixArgs {
    /// TOML file with the matrix; command-line options override it.
    #[arg(long, conflicts_with = "preset")]
    pub config: Option<PathBuf>,
    /// A write-up's matrix (see `vmbench presets`); command-line options override it.
    #[arg(long)]
    pub preset: Option<String>,
    /// Hypervisors: kvm, qemu (TCG), xen, host (no guest: the same workload run by the host on
    /// the same storage, the write-ups' host rows; --format raw, layouts raw, ext4, xfs).
    /// [default: qemu]
    #[arg(long)]
    pub hypervisor: Option<String>,
    /// Xen modes: pvh, hvm (Xen cells only). [default: pvh]
    #[arg(long)]
    pub xen_mode: Option<String>,
    /// Storage backends: local, block, nfs, iscsi, lvm, hostdir (a host directory shared with virtio-fs; layout ext4 only), rbd (Ceph RBD on an embedded single-host cluster; raw only). [default: local,nfs,iscsi]
    #[arg(long)]
    pub backend: Option<String>,
    /// Image formats: qcow2, raw. [default: qcow2,raw]
    #[arg(long)]
    pub format: Option<String>,
    /// Guest buses: virtio-blk, virtio-scsi. [default: virtio-blk]
    #[arg(long)]
    pub bus: Option<String>,
    /// Host cache modes: none, writeback, writethrough, directsync, unsafe. [default: none]
    #[arg(long)]
    pub cache: Option<String>,
    /// Host AIO modes: native, threads, io_uring. [default: native]
    #[arg(long)]
    pub io: Option<String>,
    /// Guest disk layouts: raw, ext4, xfs, part-ext4 (one MBR partition), lvm-ext4, lvm-xfs (an LV made in the guest), split-part-ext4, split-lvm-ext4 (one disk split in two partitions, an LV on the second: ext4 on partition 1 or on the LV; the disk is twice the size asked). [default: raw]
    #[arg(long)]
    pub layout: Option<String>,
    /// How each disk is made from the run's base image (filled with known data once per run),
    /// as a cloud lays out instance disks: flat (empty, no base), overlay (qcow2 backed by the
    /// base: Nova's qcow2), copy (the base copied in full: Nova's raw/flat/lvm), clone (an RBD
    /// clone of a protected snapshot: Nova's rbd). [default: flat]
    #[arg(long = "instance-disk", value_name = "KIND,...")]
    pub instance: Option<String>,
    /// Workloads: pg-randrw, seq-read-1m, seq-write-1m, rand-read-4k, rand-write-4k,
    /// first-write-4k and base-read-4k (each block once, no prefill: copy-on-write allocation
    /// and reads served by the base), bonnie, file:PATH (a fio job file). [default: pg-randrw]
    #[arg(long)]
    pub workload: Option<String>,
    /// Repeats of every cell (order reversed on every other repeat): a number, or `auto` to
    /// repeat each cell until its read/write IOPS (bonnie++: block figures) vary by less than
    /// --max-cv, 3 to --max-repeats times. [default: 1]
    #[arg(long, value_name = "N|auto")]
    pub repeat: Option<crate::matrix::repeat::Repeat>,
    /// --repeat auto: coefficient of variation (%) under which a cell is stable. [default: 5]
    #[arg(long, value_name = "PCT")]
    pub max_cv: Option<f64>,
    /// --repeat auto: the most repeats of one cell (at least 3). [default: 8]
    #[arg(long, value_name = "N")]
    pub max_repeats: Option<u32>,
    /// Measured seconds per fio job. [default: 60]
    #[arg(long)]
    pub runtime: Option<u32>,
    /// Warm-up seconds, excluded from results. [default: 5]
    #[arg(long)]
    pub ramp: Option<u32>,
    /// fio test area size, e.g. 200M. [default: 200M]
    #[arg(long)]
    pub size: Option<String>,
    /// Disk under test size in MiB. [default: 1024]
    #[arg(long)]
    pub disk_mib: Option<u64>,
    /// Cap the disk under test at N read+write IOPS (libvirt <iotune> total_iops_sec), e.g. to
    /// emulate a cloud disk or to give `compare` a known regression. [default: no limit]
    #[arg(long, value_name = "N")]
    pub iops_limit: Option<u64>,
    /// Cap the disk under test at MIB MiB/s read+write (libvirt <iotune> total_bytes_sec).
    /// [default: no limit]
    #[arg(long, value_name = "MIB")]
    pub bw_limit: Option<u64>,
    /// Apply --iops-limit/--bw-limit only to the cells matching DIM=VALUE[,DIM=VALUE...], e.g.
    /// `emulator=b`: one side of an in-run A/B capped, a known regression to find.
    /// [default: every cell]
    #[arg(long, value_name = "RULE")]
    pub cap_only: Option<String>,
    /// No per-second fio logs (no time series in reports, no within-run stability figure).
    #[arg(long)]
    pub no_time_series: bool,
    /// Per-second bandwidth and IOPS logs, but no latency log (fio accounts every I/O into it;
    /// the job's mean and percentile latencies stay).
    #[arg(long)]
    pub no_latency_series: bool,
    /// The closing table shows every metric, not only the headline rows.
    #[arg(long)]
    pub all_metrics: bool,
    /// The guest does not stream fio's status line (no live IOPS on the progress line).
    #[arg(long)]
    pub no_live_status: bool,
    /// Fail a job after this many seconds without I/O progress on the disk under test while the
    /// guest is alive; 0 turns the watchdog off. [default: 60]
    #[arg(long, value_name = "SECS")]
    pub stall_timeout: Option<u64>,
    /// Measure on first allocation: skip the prefill pass.
    #[arg(long)]
    pub no_prefill: bool,
    /// bonnie++ -n: files to create, in thousands. [default: 16]
    #[arg(long)]
    pub bonnie_files: Option<u32>,
    /// bonnie++ -s (file size) as a multiple of the guest's RAM, 2 to 16; the disk grows to
    /// hold it. [default: 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(2..=16))]
    pub bonnie_size_ratio: Option<u32>,
    /// After each fio cell, run the same job with the host's fio on the disk's backing file or
    /// device, and report guest/host efficiency.
    #[arg(long)]
    pub host_baseline: bool,
    /// After each cell's job, start K more instances whose disks are made the cell's way from
    /// the same base (K overlays, copies or RBD clones), all together; each reads its boot set.
    /// Stores the time until all said hello and read it, and the slowest boot. Without K: sized
    /// for this host (2 per CPU, what half the free memory holds, 2 to 8). local and rbd cells;
    /// others say why not. [default: off]
    #[arg(long, value_name = "K", num_args = 0..=1, default_missing_value = "auto")]
    pub boot_storm: Option<StormSize>,
    /// Guest vCPUs. [default: 2]
    #[arg(long)]
    pub vcpus: Option<u32>,
    /// Guest memory in MiB. [default: 512]
    #[arg(long)]
    pub memory: Option<u64>,
    /// Seconds to wait for the guest agent's hello. [default: 60]
    #[arg(long)]
    pub boot_timeout: Option<u64>,
    /// Do not boot-probe KVM before the run; its cells then fail after the boot timeout.
    #[arg(long)]
    pub no_probe: bool,
    /// libvirt URI: `URI` for every hypervisor, or `HV=URI` (repeatable), e.g.
    /// `kvm=qemu+ssh://host1/system`. [default: qemu:///system; xen:///system for xen]
    #[arg(long)]
    pub connect: Vec<String>,
    /// A libvirt host to run every cell on, NAME=URI (repeatable), e.g.
    /// `h2=qemu+ssh://root@h2/system`; cells on different hosts run at the same time.
    /// [default: one host, local, with --connect's URIs]
    #[arg(long = "host", value_name = "NAME=URI")]
    pub hosts: Vec<String>,
    /// vmbench's directory on host NAME, a path on that host (repeatable): the run's disks in a
    /// subdirectory, the uploaded kernel and initramfs beside it.
    /// [default: /var/lib/libvirt/images/vmbench on a remote host]
    #[arg(long = "host-pool-dir", value_name = "NAME=DIR")]
    pub host_pool_dirs: Vec<String>,
    /// A QEMU build to run every QEMU/KVM cell on, NAME=PATH[,NAME=PATH...] (repeatable):
    /// libvirt's <emulator>, one dimension interleaved in the run and recorded in each cell's
    /// provenance; `vmbench compare --within RUN --along emulator=A,B` compares the sides.
    /// [default: the binary libvirt picks]
    #[arg(long = "emulator", value_name = "NAME=PATH")]
    pub emulators: Vec<String>,
    /// Drop cells matching DIM=VALUE[,DIM=VALUE...] (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
    /// Run only cells matching DIM=VALUE[,DIM=VALUE...] (repeatable).
    #[arg(long)]
    pub include: Vec<String>,
    /// The storage backends' flags (`--local-dir`, `--nfs`, `--lvm-vg` ...), each defined in
    /// its backend's file.
    #[command(flatten)]
    pub storage: crate::storage::options::StorageArgs,
    /// fio block sizes to sweep over the preset's, e.g. 4k,64k (fio presets only).
    /// [default: the preset's]
    #[arg(long, value_name = "LIST")]
    pub bs: Option<String>,
    /// fio queue depths to sweep over the preset's, e.g. 1,4,16,64. [default: the preset's]
    #[arg(long, value_name = "LIST")]
    pub iodepth: Option<String>,
    /// fio job counts to sweep over the preset's, e.g. 1,2. [default: the preset's]
    #[arg(long, value_name = "LIST")]
    pub numjobs: Option<String>,
    /// fio read percentages (rwmixread) to sweep over the preset's, e.g. 100,70,0.
    /// [default: the preset's]
    #[arg(long, value_name = "LIST")]
    pub rwmix: Option<String>,
    /// fio's direct flag to sweep over the preset's: 0 is buffered I/O through the guest's page
    /// cache, 1 bypasses it, e.g. 0 or 0,1. [default: the preset's, 1]
    #[arg(long, value_name = "LIST")]
    pub direct: Option<String>,
    /// A dedicated QEMU I/O thread for the disk under test: off, on. [default: off]
    #[arg(long, value_name = "LIST")]
    pub iothread: Option<String>,
    /// virtio queues of the disk (virtio-scsi: its controller), e.g. 1,2. [default: QEMU's]
    #[arg(long, value_name = "LIST")]
    pub queues: Option<String>,
    /// Pin vCPUs, emulator and I/O thread to host CPUs: off, on (needs vcpus + 1 host CPUs).
    /// [default: off]
    #[arg(long, value_name = "LIST")]
    pub pin: Option<String>,
    /// Use --block-device even if it holds a filesystem signature.
    #[arg(long)]
    pub force: bool,
    /// Test only: inject a fault, KIND[@CELL] (e.g. `panic@1`); repeatable.
    #[arg(long, hide = true, value_name = "KIND")]
    pub inject_fault: Vec<String>,
    /// Test only: seconds of guest silence before a job is declared stalled. [default: 15]
    #[arg(long, hide = true)]
    pub heartbeat_timeout: Option<u64>,
    /// Benchmark only (scripts/bench-fidelity --in-boot): before its measured job, each cell
    /// runs N rounds of the job with the instruments on and off inside its one boot and writes
    /// fidelity.json. [default: 0, off]
    #[arg(long, hide = true, value_name = "N")]
    pub fidelity_pairs: Option<u32>,
    /// Benchmark only: which variants a --fidelity-pairs round holds: pair (full, hand), all
    /// (also each instrument off alone), logs (full, no logs, no latency logs), gate (no
    /// latency logs, as the nightly gate runs, and hand) or wakeups (hand, the status stream
    /// alone, the watchdog alone, both). [default: pair]
    #[arg(long, hide = true, value_name = "SET")]
    pub fidelity_variants: Option<String>,
    /// Print the cells, their estimated duration and domain XML; start nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue an interrupted run: run only the cells of RUN_DIR that have no result.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Where run directories are created.
    #[arg(long, default_value = "vmbench-runs")]
    pub runs_dir: PathBuf,
    /// Where each run's work directory (disk images, sockets, LUN files) is made. Every
    /// directory above it must be traversable by QEMU's user (o+x).
    #[arg(long, default_value = "/var/lib/vmbench/work")]
    pub work_dir: PathBuf,
    /// Image options.
    #[command(flatten)]
    pub image: ImageArgs,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
    /// Network links to the embedded NFS/iSCSI servers (nfs and iscsi cells): `loopback`
    /// (unshaped) or RATE[+DELAY] shaped with tc both ways, e.g. 100mbit,1gbit+0.5ms.
    /// [default: loopback]
    #[arg(long, value_name = "LINK,...")]
    pub link: Option<String>,
}

/// `vmbench doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// libvirt URI for kvm/qemu.
    #[arg(long, default_value = "qemu:///system")]
    pub connect: String,
    /// libvirt URI for xen.
    #[arg(long, default_value = "xen:///system")]
    pub xen_connect: String,
    /// Skip the KVM boot probe (it boots the image once).
    #[arg(long)]
    pub no_probe: bool,
    /// Where run directories are (doctor reports how much they hold).
    #[arg(long, default_value = "vmbench-runs")]
    pub runs_dir: PathBuf,
    /// Image options.
    #[command(flatten)]
    pub image: ImageArgs,
}

/// `vmbench cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// libvirt URI.
    #[arg(long, default_value = "qemu:///system")]
    pub connect: String,
    /// Only what this run left (its id); default: every vmbench leftover.
    #[arg(long)]
    pub run: Option<String>,
    /// Where run directories are (their work dirs and servers are cleaned too).
    #[arg(long, default_value = "vmbench-runs")]
    pub runs_dir: PathBuf,
    /// Print what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Output formats of `vmbench report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    /// The seeds' tables, for a terminal.
    Text,
    /// Markdown tables.
    Markdown,
    /// One row per cell, repeat and metric.
    Csv,
    /// One self-contained HTML file with SVG charts.
    Html,
}

/// `vmbench report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run id, `last`, `last-good`, or a run directory.
    #[arg(default_value = "last")]
    pub run: String,
    /// The newest run (same as RUN=last).
    #[arg(long)]
    pub last: bool,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ReportFormat,
    /// The text table's fio rows: the write-ups' headline figures, or every metric.
    #[arg(long, value_enum, default_value = "headline")]
    pub metrics: crate::report::MetricSet,
    /// Show the write-up's published table beside the run's and judge its conclusions
    /// (longhorn-localpv-openebs, xen-kvm-nfs-iscsi-local, lvm-vs-partition). Refused (exit 2)
    /// when the run was not made by that preset, unless --force.
    #[arg(long, value_name = "NAME")]
    pub against_seed: Option<String>,
    /// With --against-seed: judge the conclusions even when the run was not made by the seed's
    /// preset (the report lists what differs).
    #[arg(long, requires = "against_seed")]
    pub force: bool,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `vmbench compare --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// Terminal table.
    Text,
    /// Self-contained HTML page (summary first, 95% CIs drawn against the noise band).
    Html,
}

/// `vmbench compare`.
#[derive(Debug, Args)]
#[command(
    after_help = "Baseline keywords are relative to the candidate, never the candidate itself:\n  \
last-good  the newest good run (finished, no failed cell) started before the candidate with the \
same cells\n  \
previous   the newest finished run started before the candidate with the same cells, whatever \
its outcomes\n\
(same cells: the same cell ids; failing that, the newest run whose cells include all of the \
candidate's, or are all among them). A baseline that is the candidate is refused (exit 2).\n\n\
Method: one value per repeat (per-second samples never decide), Welch's t-test on log values, \
p-values adjusted over all verdict rows (Holm by default). The verdict family is one row per \
fact and cell: IOPS (random jobs) or bandwidth (sequential jobs), mean and p99 latency, \
bonnie++ block output, block input and seeks; derived twins are information. A row regresses \
when its adjusted p < alpha and the change exceeds the noise threshold; it is \"no change\" \
only when the 95% CI of the change lies inside +-threshold; otherwise it is inconclusive and \
names the change it could not rule out and the repeats that would decide it.\n\n\
Provenance: a change of the instrument (fio, bonnie++, guest image, guest kernel, job \
definitions) makes rows not comparable unless --force; a change of the system under test \
(QEMU, libvirt, host kernel, host CPU, storage server, disk cap) is printed first \
(`what changed: qemu 7.2.22 -> 8.2.2`) and compared.\n\n\
Exit codes: 0 no regression, no broken cell, every verdict row decided; 1 a significant \
regression, or a cell that passed in the baseline failed, went missing or became unsupported \
(unless --allow-missing); 3 not proven: nothing regressed but some row is undecided (the last \
line names the smallest drop the comparison could have seen); 2 bad input; 4 no baseline: \
last-good or previous found no earlier run with the same cells (a first night)."
)]
pub struct CompareArgs {
    /// Baseline: run id, `last-good`, `previous` (both relative to the candidate, see below),
    /// `last`, or a run directory.
    #[arg(required_unless_present = "within", conflicts_with = "within")]
    pub baseline: Option<String>,
    /// Candidate: run id, `last`, or a run directory.
    #[arg(required_unless_present = "within", conflicts_with = "within")]
    pub candidate: Option<String>,
    /// Compare inside one run (run id, `last`, or a run directory) instead of two runs: the
    /// cells that differ only in --along's dimension, interleaved in the same run (no night
    /// between them). Same statistics and exit codes.
    #[arg(
        long,
        value_name = "RUN",
        requires = "along",
        conflicts_with = "noise_from_history"
    )]
    pub within: Option<String>,
    /// With --within: DIMENSION=A,B, e.g. `emulator=old,new` (two --emulator builds),
    /// `backend=nfs,iscsi`, `format=qcow2,raw`; A is the baseline.
    #[arg(long, value_name = "DIM=A,B", requires = "within")]
    pub along: Option<String>,
    /// Changes smaller than this (in %) are noise.
    #[arg(long, default_value_t = 5.0)]
    pub threshold: f64,
    /// Per-metric threshold KEY=PCT (repeatable), e.g. write_lat_p99_us=10.
    #[arg(long)]
    pub metric_threshold: Vec<String>,
    /// Give this metric key a verdict too (repeatable); by default only each cell's verdict
    /// family has one: IOPS (random jobs) or bandwidth (sequential jobs), mean and p99 latency,
    /// bonnie++ block output, block input and seeks.
    #[arg(long = "metric", value_name = "KEY")]
    pub metric: Vec<String>,
    /// Family-wise significance level, after the correction.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Multiple-comparison correction over the verdict rows: holm, bh (Benjamini-Hochberg), none.
    #[arg(long, default_value = "holm")]
    pub correction: String,
    /// Raise each cell x metric's threshold to 2x the run-to-run CV of earlier stored runs with
    /// the same cell and provenance (needs >= 3 such runs).
    #[arg(long)]
    pub noise_from_history: bool,
    /// Compare even when the instrument (fio, bonnie++, guest image, guest kernel, job
    /// definitions) differs. Changes of the system under test never need it.
    #[arg(long)]
    pub force: bool,
    /// Cells that passed in the baseline and failed, went missing or became unsupported in the
    /// candidate are listed, not a failure (exit 1 otherwise).
    #[arg(long)]
    pub allow_missing: bool,
    /// Also write JUnit XML here (one testcase per cell and metric).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Also write every row as JSON here (both sides' n, spread, within-run CV; raw and
    /// adjusted p; threshold and its source).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Output format: a terminal table, or one self-contained HTML page.
    #[arg(long, value_enum, default_value = "text")]
    pub format: CompareFormat,
    /// Write the output here instead of stdout.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `vmbench recommend`.
#[derive(Debug, Args)]
pub struct RecommendArgs {
    /// Run id, `last` or a run directory.
    #[arg(default_value = "last")]
    pub run: String,
    /// Only cells of this workload.
    #[arg(long)]
    pub workload: Option<String>,
    /// Objectives with weights, e.g. `iops=2,p99=1`: iops, bandwidth, p99, host-cpu, memory,
    /// provision, boot, bytes, boot-storm. Replaces the weights of --for. [default: iops=1]
    #[arg(long)]
    pub objective: Option<String>,
    /// A named question that picks the workload and the weights: database (pg-randrw;
    /// iops=2,p99=2,host-cpu=1), streaming (seq-read-1m; bandwidth=3,host-cpu=1,p99=1),
    /// boot-storm (boot-storm=3,provision=2,bytes=1,boot=1), cloud-image (first-write-4k;
    /// iops=2,p99=1,boot-storm=1,provision=1,bytes=1). Objectives a run has no figure for
    /// are said "not measured in this run" and left out.
    #[arg(long = "for", value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Also write the recommendation (or why there is none) as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write it as an HTML page: the ranking with each figure's 95% interval, and a
    /// scatter of the first two objectives with the intervals as error bars.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// Output formats of `vmbench export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// The versioned JSON that `vmbench import` reads.
    Json,
    /// OpenMetrics text (for node_exporter's textfile collector or a Pushgateway).
    Openmetrics,
}

/// `vmbench export`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Run id or `last`.
    pub run: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "json")]
    pub format: ExportFormat,
    /// Output file (stdout when absent).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// `vmbench import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A JSON file written by `vmbench export`.
    pub file: PathBuf,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// The configuration a stored run's recorded command line (`RunRecord::command`) builds today,
/// or why it builds none (not a `vmbench matrix` command, a flag that no longer parses).
pub fn recorded_matrix_config(command: &[String]) -> Result<MatrixConfig, String> {
    use clap::Parser as _;
    let line = command.join(" ");
    let cli = Cli::try_parse_from(command).map_err(|e| {
        let e = e.to_string();
        let first = e.lines().next().unwrap_or_default().to_string();
        format!("the recorded command `{line}` does not parse today: {first}")
    })?;
    match cli.command {
        Command::Matrix(a) => matrix_config(&a).map_err(|e| {
            format!("the recorded command `{line}` gives no configuration today: {e}")
        }),
        _ => Err(format!(
            "the run was not made by `vmbench matrix` (recorded command: `{line}`)"
        )),
    }
}

/// Builds the matrix configuration: defaults, then the TOML file, then CLI flags.
pub fn matrix_config(a: &MatrixArgs) -> Result<MatrixConfig, CliError> {
    let mut c = base_config(a)?;
    sweep_lists(&mut c, a)?;
    sweep_numbers(&mut c, a)?;
    if let Some(s) = &a.link {
        c.link = parse_links(s)?;
    }
    run_settings(&mut c, a);
    hosts_and_rules(&mut c, a)?;
    storage_options(&mut c.storage, a)?;
    fidelity(&mut c, a)?;
    test_hooks(&mut c, a)?;
    if a.preset.is_some() {
        // A preset's block system needs a device the user names; without one it is listed as
        // not measured (see `SeedPreset::not_here`) instead of refusing the whole preset.
        let storage = &c.storage;
        c.backend
            .retain(|b| !crate::storage::descriptor(*b).preset_needs_device(storage));
    }
    c.validate().map_err(|e| CliError::Usage(e.to_string()))?;
    Ok(c)
}

/// The configuration the flags start from: `--config` wins over `--preset`, else the defaults.
fn base_config(a: &MatrixArgs) -> Result<MatrixConfig, CliError> {
    Ok(match (&a.config, &a.preset) {
        (Some(p), _) => MatrixConfig::from_file(p).map_err(|e| CliError::Usage(e.to_string()))?,
        (None, Some(name)) => crate::matrix::presets::seed_preset(name)
            .map_err(CliError::Usage)?
            .config(),
        (None, None) => MatrixConfig::default(),
    })
}

/// The named sweep lists (`--backend file,lvm`); a given flag replaces the whole list.
fn sweep_lists(c: &mut MatrixConfig, a: &MatrixArgs) -> Result<(), CliError> {
    macro_rules! list {
        ($field:ident) => {
            if let Some(s) = &a.$field {
                c.$field = parse_list(s)?;
            }
        };
    }
    list!(hypervisor);
    list!(xen_mode);
    list!(backend);
    list!(format);
    list!(bus);
    list!(cache);
    list!(io);
    list!(layout);
    list!(instance);
    list!(workload);
    list!(bs);
    list!(iothread);
    list!(pin);
    Ok(())
}

/// The per-run scalars (repeats, sizes, timeouts, limits) and the `--no-*` switches; clap has
/// already checked each value, so nothing here can fail.
fn run_settings(c: &mut MatrixConfig, a: &MatrixArgs) {
    macro_rules! scalar {
        ($field:ident, $cfg:ident) => {
            if let Some(v) = a.$field.clone() {
                c.$cfg = v;
            }
        };
    }
    scalar!(repeat, repeat);
    scalar!(max_cv, max_cv);
    scalar!(max_repeats, max_repeats);
    scalar!(runtime, runtime);
    scalar!(ramp, ramp);
    scalar!(size, size);
    scalar!(disk_mib, disk_mib);
    scalar!(vcpus, vcpus);
    scalar!(bonnie_files, bonnie_files);
    scalar!(bonnie_size_ratio, bonnie_size_ratio);
    scalar!(memory, memory_mib);
    scalar!(boot_timeout, boot_timeout);
    scalar!(stall_timeout, stall_timeout);
    if let Some(n) = a.iops_limit {
        c.iops_limit = Some(n);
    }
    if let Some(m) = a.bw_limit {
        c.bw_limit_mib = Some(m);
    }
    if a.no_prefill {
        c.prefill = false;
    }
    if a.no_time_series {
        c.time_series = false;
    }
    if a.no_latency_series {
        c.latency_series = false;
    }
    if a.no_live_status {
        c.live_status = false;
    }
    if a.no_probe {
        c.probe = false;
    }
    c.host_baseline |= a.host_baseline;
    match a.boot_storm {
        Some(StormSize::K(k)) => c.boot_storm = k,
        Some(StormSize::Auto) => c.boot_storm = crate::matrix::storm::host_default_k(c.memory_mib),
        None => {}
    }
}

/// Where the hypervisors run (`--connect`, `--host`, `--host-pool-dir`) and which cells the
/// `--exclude`/`--include` rules drop or keep, applied in the order given.
fn hosts_and_rules(c: &mut MatrixConfig, a: &MatrixArgs) -> Result<(), CliError> {
    for spec in &a.connect {
        apply_connect(c, spec)?;
    }
    for spec in &a.hosts {
        apply_host(c, spec)?;
    }
    for spec in &a.host_pool_dirs {
        apply_host_pool_dir(c, spec)?;
    }
    for spec in a.emulators.iter().flat_map(|s| s.split(',')) {
        apply_emulator(c, spec)?;
    }
    if let Some(r) = &a.cap_only {
        c.cap_only = crate::matrix::parse_rule(r).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    for r in &a.exclude {
        c.exclude
            .push(crate::matrix::parse_rule(r).map_err(|e| CliError::Usage(e.to_string()))?);
    }
    for r in &a.include {
        c.include
            .push(crate::matrix::parse_rule(r).map_err(|e| CliError::Usage(e.to_string()))?);
    }
    Ok(())
}

/// The storage backends' options (`--local-dir`, `--nfs`, `--lvm-vg`, ...).
fn storage_options(
    s: &mut crate::matrix::config::StorageConfig,
    a: &MatrixArgs,
) -> Result<(), CliError> {
    a.storage.apply(s).map_err(CliError::Usage)?;
    s.force |= a.force;
    Ok(())
}

/// The numeric sweep lists (`--iodepth 1,4,16`), each checked against its range.
fn sweep_numbers(c: &mut MatrixConfig, a: &MatrixArgs) -> Result<(), CliError> {
    use crate::cell::parse_numbers;
    if let Some(s) = &a.iodepth {
        c.iodepth = parse_numbers(s, "iodepth", 1, 65536)?;
    }
    if let Some(s) = &a.numjobs {
        c.numjobs = parse_numbers(s, "numjobs", 1, 1024)?;
    }
    if let Some(s) = &a.direct {
        c.direct = parse_numbers(s, "direct (0: buffered, 1: O_DIRECT)", 0, 1)?;
    }
    if let Some(s) = &a.rwmix {
        c.rwmix = parse_numbers(s, "rwmix (read %)", 0, 100)?;
    }
    if let Some(s) = &a.queues {
        c.queues = parse_numbers(s, "queues", 1, 256)?;
    }
    Ok(())
}

/// `--link loopback,100mbit`: each parsed, duplicates (same rate and delay) dropped.
fn parse_links(s: &str) -> Result<Vec<crate::cell::Link>, CliError> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let l: crate::cell::Link = part
            .parse()
            .map_err(|e| CliError::Usage(format!("--link: {e}")))?;
        if !out.contains(&l) {
            out.push(l);
        }
    }
    Ok(out)
}

fn test_hooks(c: &mut MatrixConfig, a: &MatrixArgs) -> Result<(), CliError> {
    for f in &a.inject_fault {
        c.test_hooks.faults.push(
            f.parse()
                .map_err(|e| CliError::Usage(format!("--inject-fault: {e}")))?,
        );
    }
    match a.heartbeat_timeout {
        Some(0) => Err(CliError::Usage(
            "--heartbeat-timeout must be at least 1".into(),
        )),
        Some(s) => {
            c.test_hooks.heartbeat_timeout = Some(std::time::Duration::from_secs(s));
            Ok(())
        }
        None => Ok(()),
    }
}

/// `--fidelity-pairs N [--fidelity-variants SET]`: the in-boot instrument comparison.
fn fidelity(c: &mut MatrixConfig, a: &MatrixArgs) -> Result<(), CliError> {
    let variants = match &a.fidelity_variants {
        Some(v) => v
            .parse()
            .map_err(|e| CliError::Usage(format!("--fidelity-variants: {e}")))?,
        None => Default::default(),
    };
    match a.fidelity_pairs {
        None if a.fidelity_variants.is_some() => Err(CliError::Usage(
            "--fidelity-variants needs --fidelity-pairs N".into(),
        )),
        None => Ok(()),
        Some(0) => Err(CliError::Usage(
            "--fidelity-pairs must be at least 1".into(),
        )),
        Some(pairs) => {
            c.fidelity = Some(crate::matrix::fidelity::Plan { pairs, variants });
            Ok(())
        }
    }
}

/// `--host NAME=URI`: a name twice is an error, not a silent override.
fn apply_host(c: &mut MatrixConfig, spec: &str) -> Result<(), CliError> {
    let (name, uri) = spec
        .split_once('=')
        .filter(|(_, uri)| uri.contains("://"))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "--host {spec}: expected NAME=URI, e.g. h2=qemu+ssh://root@h2/system"
            ))
        })?;
    let name: crate::cell::HostName = name.parse()?;
    if c.hosts.insert(name.clone(), uri.to_string()).is_some() {
        return Err(CliError::Usage(format!("--host {name} given twice")));
    }
    Ok(())
}

/// `--emulator NAME=PATH` (the path is checked by `validate`); a name twice is an error.
fn apply_emulator(c: &mut MatrixConfig, spec: &str) -> Result<(), CliError> {
    let (name, path) = spec
        .split_once('=')
        .filter(|(_, p)| !p.is_empty())
        .ok_or_else(|| {
            CliError::Usage(format!(
                "--emulator {spec}: expected NAME=PATH, e.g. new=/opt/qemu-9/bin/qemu-system-x86_64"
            ))
        })?;
    let name: crate::cell::EmulatorName = name.parse()?;
    if c.emulators.insert(name.clone(), path.into()).is_some() {
        return Err(CliError::Usage(format!("--emulator {name} given twice")));
    }
    Ok(())
}

/// `--host-pool-dir NAME=DIR` (the host and the path are checked by `validate`).
fn apply_host_pool_dir(c: &mut MatrixConfig, spec: &str) -> Result<(), CliError> {
    let (name, dir) = spec.split_once('=').ok_or_else(|| {
        CliError::Usage(format!(
            "--host-pool-dir {spec}: expected NAME=DIR, e.g. h2=/srv/vmbench"
        ))
    })?;
    let name: crate::cell::HostName = name.parse()?;
    if c.host_pool_dirs.insert(name.clone(), dir.into()).is_some() {
        return Err(CliError::Usage(format!(
            "--host-pool-dir {name} given twice"
        )));
    }
    Ok(())
}

fn apply_connect(c: &mut MatrixConfig, spec: &str) -> Result<(), CliError> {
    match spec.split_once('=') {
        // `kvm=qemu+ssh://...`: the part before '=' must be a hypervisor (a URI's own '=' comes
        // after "://").
        Some((hv, uri)) if !hv.contains("://") => {
            let hv: Hypervisor = hv.parse()?;
            c.connect.insert(hv, uri.to_string());
        }
        _ => {
            for hv in Hypervisor::ALL {
                if hv.desc().shares_hosts {
                    c.connect.insert(*hv, spec.to_string());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<MatrixConfig, CliError> {
        let mut full = vec!["vmbench", "matrix"];
        full.extend(v);
        let cli = Cli::try_parse_from(full).map_err(|e| CliError::Usage(e.to_string()))?;
        let Command::Matrix(m) = cli.command else {
            unreachable!()
        };
        matrix_config(&m)
    }

    #[test]
    fn bad_storage_options_are_usage_errors_naming_the_valid_forms() {
        for (flag, value, want) in [
            ("--prealloc", "falloc", "valid: off, metadata, full"),
            ("--nfs", "nfs://h", "nfs://HOST/EXPORT"),
            ("--iscsi", "iscsi://h/x/1", "iscsi://PORTAL[:PORT]/IQN/LUN"),
        ] {
            let e = args(&[flag, value]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{flag}");
            let msg = e.to_string();
            assert!(msg.contains(flag) && msg.contains(want), "{msg}");
        }
        let c = args(&["--prealloc", "full"]).unwrap();
        assert_eq!(
            c.storage.prealloc,
            Some(crate::storage::local::Prealloc::Full)
        );
    }

    #[test]
    fn iscsi_chap_file_is_checked_before_the_run() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("chap");
        let p = f.to_str().unwrap();
        let lun = "iscsi://h/iqn.2026-12.dev.x:t/1";
        let e = args(&["--iscsi-chap-file", p]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("needs --iscsi"), "{e}");
        let e = args(&["--iscsi", lun, "--iscsi-chap-file", p]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains(p), "{e}");
        std::fs::write(&f, "user=bench\nsecret=hunter22hunter22\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let e = args(&["--iscsi", lun, "--iscsi-chap-file", p]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.to_string().contains("unknown key 'user'"), "{e}");
        assert!(!e.to_string().contains("hunter22"), "{e}");
        std::fs::write(&f, "username=bench\nsecret=hunter22hunter22\n").unwrap();
        let c = args(&["--iscsi", lun, "--iscsi-chap-file", p]).unwrap();
        assert_eq!(c.storage.iscsi_chap_file.as_deref(), Some(f.as_path()));
    }

    #[test]
    fn cli_overrides_and_errors() {
        let c = args(&[
            "--hypervisor",
            "kvm,qemu",
            "--format",
            "raw",
            "--runtime",
            "5",
        ])
        .unwrap();
        assert_eq!(c.hypervisor, vec![Hypervisor::Kvm, Hypervisor::Qemu]);
        assert_eq!(c.runtime, 5);
        let e = args(&["--backend", "ceph"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string()
                .contains("valid: local, block, nfs, iscsi, lvm"),
            "{e}"
        );
        let e = args(&["--hypervisor", ""]).unwrap_err();
        assert!(e.to_string().contains("'hypervisor' is empty"), "{e}");
    }

    #[test]
    fn sweep_options_parse_and_bad_ones_exit_2_naming_the_problem() {
        let c = args(&[
            "--bs",
            "4k,64K",
            "--iodepth",
            "1,16",
            "--rwmix",
            "70",
            "--iothread",
            "off,on",
            "--queues",
            "1,2",
        ])
        .unwrap();
        assert_eq!(
            c.bs.iter().map(|b| b.to_string()).collect::<Vec<_>>(),
            ["4k", "64k"]
        );
        assert_eq!(
            (c.iodepth.clone(), c.rwmix.clone()),
            (vec![1, 16], vec![70])
        );
        assert_eq!(c.queues, vec![1, 2]);
        let p = crate::matrix::expand(&c);
        // 6 default cells x 2 bs x 2 iodepth x 2 iothread x 2 queues.
        assert_eq!(p.cells.len(), 6 * 16);
        let ids: std::collections::BTreeSet<String> = p.cells.iter().map(|c| c.id()).collect();
        assert_eq!(ids.len(), p.cells.len(), "ids are unique");
        assert!(ids.contains(
            "qemu-local-raw-virtio-blk-none-native-raw-pg-randrw-bs64k-qd16-rw70-iothread-q2"
        ));
        for (flag, value, want) in [
            ("--bs", "4x", "unknown block size (bs) '4x'"),
            ("--bs", "0", "e.g. 4k, 64k"),
            (
                "--iodepth",
                "0",
                "unknown iodepth '0' (valid: a whole number from 1 to 65536)",
            ),
            ("--rwmix", "101", "from 0 to 100"),
            ("--direct", "2", "(valid: 0 or 1)"),
            ("--numjobs", "two", "unknown numjobs 'two'"),
            (
                "--iothread",
                "yes",
                "unknown iothread 'yes' (valid: off, on)",
            ),
            ("--queues", "0", "unknown queues '0'"),
            ("--pin", "1", "valid: off, on"),
        ] {
            let e = args(&[flag, value]).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{flag} {value}");
            assert!(e.to_string().contains(want), "{flag} {value}: {e}");
        }
        for workload in ["bonnie", "file:/tmp/x.fio"] {
            let e = args(&["--workload", workload, "--iodepth", "4"]).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            let msg = e.to_string();
            assert!(
                msg.contains("--iodepth override a fio preset") && msg.contains(workload),
                "{msg}"
            );
        }
        assert!(args(&["--workload", "bonnie", "--iothread", "on"]).is_ok());
    }

    #[test]
    fn pinning_needs_a_cpu_more_than_the_vcpus() {
        let c = args(&["--vcpus", "2"]).unwrap();
        let pinned = MatrixConfig {
            pin: vec![crate::cell::Pin::Off, crate::cell::Pin::On],
            ..c
        };
        pinned.check_pin(3).unwrap();
        let e = pinned.check_pin(2).unwrap_err().to_string();
        assert!(
            e.contains("vcpus + 1 = 3") && e.contains("this host has 2"),
            "{e}"
        );
        MatrixConfig::default().check_pin(1).unwrap();
    }

    #[test]
    fn clap_definitions_are_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn connect_per_hypervisor() {
        let c = args(&[
            "--connect",
            "kvm=qemu+ssh://h1/system",
            "--connect",
            "xen=xen+ssh://h2",
        ])
        .unwrap();
        assert_eq!(c.uri(Hypervisor::Kvm), "qemu+ssh://h1/system");
        assert_eq!(c.uri(Hypervisor::Qemu), "qemu:///system");
        assert_eq!(c.uri(Hypervisor::Xen), "xen+ssh://h2");
        let c = args(&["--connect", "qemu+tcp://h3/system?x=1"]).unwrap();
        assert_eq!(c.uri(Hypervisor::Kvm), "qemu+tcp://h3/system?x=1");
        assert!(args(&["--connect", "vmware=esx://h"]).is_err());
    }

    #[test]
    fn hosts_by_name() {
        let c = args(&[
            "--host",
            "local=qemu:///system",
            "--host",
            "h2=qemu+tcp://h2/system",
        ])
        .unwrap();
        let names: Vec<String> = c.host_names().iter().map(|h| h.to_string()).collect();
        assert_eq!(names, ["h2", "local"]);
        assert_eq!(
            c.host_uri(&"h2".parse().unwrap(), Hypervisor::Kvm),
            "qemu+tcp://h2/system"
        );
        assert_eq!(args(&[]).unwrap().host_names(), [Default::default()]);
        for bad in [
            &["--host", "h2"][..],
            &["--host", "H2=qemu:///system"],
            &[
                "--host",
                "a=qemu:///system",
                "--host",
                "a=qemu+tcp://x/system",
            ],
        ] {
            assert!(args(bad).is_err(), "{bad:?}");
        }
    }
}

/// `vmbench trend --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrendFormat {
    /// Terminal text.
    Text,
    /// Self-contained HTML page: one chart per cell x metric.
    Html,
    /// Every series, change point and the gate's verdict as JSON.
    Json,
}

/// `vmbench trend --test`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TrendTest {
    /// Student t-test between the segments either side (Apache Otava); works from 5 nights.
    Ttest,
    /// Permutation test of the energy statistic (MongoDB); needs dozens of nights.
    Permutation,
}

/// `vmbench trend`.
#[derive(Debug, Args)]
#[command(
    after_help = "Method: one value per night (the mean of its repeats) per cell x headline \
metric, over the stored runs of this host whose instrument matches the newest night's;\n\
E-Divisive with means finds change points, kept when significant at --alpha and at least \
--min-change % from the mean before.\n\
--gate fails tonight (the newest run) on a regression that begins within the last --within \
nights (two nights must show it) or a cell that broke."
)]
pub struct TrendArgs {
    /// Decide tonight: exit 1 on a new regression change point or a broken cell.
    #[arg(long)]
    pub gate: bool,
    /// The gate fails on a regression that began within this many last nights (tonight
    /// included) and was not already reported the night before; a change needs two nights to
    /// be seen, so the earliest is the night after it began.
    #[arg(long, default_value_t = 4)]
    pub within: usize,
    /// Smallest change kept, in % of the mean before it.
    #[arg(long, default_value_t = 5.0)]
    pub min_change: f64,
    /// Significance level of a change point, per series.
    #[arg(long, default_value_t = 0.001)]
    pub alpha: f64,
    /// Significance test of a candidate change point.
    #[arg(long, value_enum, default_value = "ttest")]
    pub test: TrendTest,
    /// Shuffles per test with --test permutation.
    #[arg(long, default_value_t = 999)]
    pub permutations: usize,
    /// Give this metric key a series too (repeatable); by default only the headline metrics.
    #[arg(long = "metric", value_name = "KEY")]
    pub metric: Vec<String>,
    /// How many of the newest nights to read.
    #[arg(long, default_value_t = 120)]
    pub nights: usize,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: TrendFormat,
    /// Also write the series, change points and verdict as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write the output here instead of stdout.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Store options.
    #[command(flatten)]
    pub db: DbArgs,
}

/// The trend options a `TrendArgs` asks for, or why they are invalid.
pub fn trend_options(a: &TrendArgs) -> Result<crate::trend::TrendOptions, String> {
    use crate::trend::edivisive::Significance;
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        return Err(format!(
            "--alpha {} is not between 0 and 1 (exclusive)",
            a.alpha
        ));
    }
    if !(a.min_change >= 0.0 && a.min_change.is_finite()) {
        return Err(format!(
            "--min-change {} is not a percentage >= 0",
            a.min_change
        ));
    }
    if a.within == 0 {
        return Err("--within 0: give at least 1 night (tonight)".into());
    }
    if a.nights < crate::trend::MIN_NIGHTS {
        return Err(format!(
            "--nights {}: the trend needs at least {} nights",
            a.nights,
            crate::trend::MIN_NIGHTS
        ));
    }
    let significance = match a.test {
        TrendTest::Ttest => Significance::TTest,
        TrendTest::Permutation if a.permutations < 19 => {
            return Err(format!(
                "--permutations {}: at least 19 (a permutation p cannot go below 1/(N+1))",
                a.permutations
            ))
        }
        TrendTest::Permutation => Significance::Permutation {
            permutations: a.permutations,
            seed: 1234,
        },
    };
    Ok(crate::trend::TrendOptions {
        alpha: a.alpha,
        min_magnitude_pct: a.min_change,
        within_nights: a.within,
        significance,
        extra_metrics: a.metric.clone(),
    })
}

/// `--boot-storm`'s value: a number of instances, or `auto` (sized for this host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StormSize {
    /// Sized for this host when the run is configured.
    Auto,
    /// This many.
    K(u32),
}

impl std::str::FromStr for StormSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let max = crate::matrix::storm::MAX_K;
        match s {
            "auto" => Ok(StormSize::Auto),
            _ => match s.parse::<u32>() {
                Ok(k) if (2..=max).contains(&k) => Ok(StormSize::K(k)),
                _ => Err(format!(
                    "'{s}' is not a storm size: give a number of instances from 2 to {max}, \
                     or no value (sized for this host)"
                )),
            },
        }
    }
}
