//! Issue 30 items 3-5: the `cloud-image-backends` preset end to end, then `recommend` on it, as
//! the README gives them. Shortened (said here, and the only changes to the preset): CI-sized
//! jobs (tests/common: 2 s, 32M on a 128 MiB disk, 384 MiB guests), one workload
//! (`first-write-4k`, the one the `cloud-image` profile ranks; the preset also runs
//! `base-read-4k`) and a storm of 2 instances (the preset sizes it for the host). Kept: Nova's
//! five layouts, 3 repeats. Each layout that exists here passes all repeats with its boot-storm,
//! provisioning and allocation figures; LVM's copy is listed skipped with its reason; the
//! recommendation orders every neighbouring pair with an interval or says it is not separable;
//! nothing is left.
use crate::common;
use common::*;
use std::process::Command;
use vmbench::results::CellResult;

#[test]
#[ignore = "host: root libvirtd qemu ganesha ceph"]
fn the_cloud_preset_measures_each_layout_and_recommend_orders_every_pair() {
    let s = Scratch::new();
    let out = s.matrix(&[
        "--preset",
        "cloud-image-backends",
        "--workload",
        "first-write-4k",
        "--boot-storm",
        "2",
        "--no-probe",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let (_, rec) = s.run_record();
    let next = format!(
        "preset cloud-image-backends: next: vmbench recommend {} --for cloud-image",
        rec.run_id
    );
    assert!(stderr.contains(&next), "{stderr}");
    // LVM: without --lvm-vg the preset leaves its cells out, and says so before the run.
    assert!(
        stderr.contains("preset cloud-image-backends: not measured here: Nova's lvm"),
        "{stderr}"
    );
    assert!(rec.cells.iter().all(|c| c.cell.backend.as_str() != "lvm"));
    let layouts = [
        ("local", "overlay"),
        ("nfs", "overlay"),
        ("local", "copy"),
        ("rbd", "clone"),
    ];
    for (backend, instance) in layouts {
        let runs: Vec<&CellResult> = (rec.cells.iter())
            .filter(|c| c.cell.backend.as_str() == backend && c.cell.instance.as_str() == instance)
            .collect();
        assert_eq!(runs.len(), 3, "{backend} {instance}: 3 repeats");
        for c in runs {
            assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
            assert_eq!(num(c, "boot_storm_instances"), 2.0, "{}", c.cell_id);
            let (hello, ready) = (
                num(c, "boot_storm_all_hello_s"),
                num(c, "boot_storm_all_ready_s"),
            );
            assert!(
                hello > 0.5 && ready > hello && num(c, "boot_storm_slowest_boot_s") <= hello,
                "{}: hello {hello} ready {ready}",
                c.cell_id
            );
            assert!(num(c, "write_iops") > 0.0);
            assert!(c.timings.provision_ms > 0);
            assert_eq!(c.params["instance_disk"], instance);
        }
    }
    let mean_mib = |backend: &str, instance: &str| {
        let v: Vec<f64> = (rec.cells.iter())
            .filter(|c| c.cell.backend.as_str() == backend && c.cell.instance.as_str() == instance)
            .map(|c| num(c, "disk_allocated_mib"))
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    // A copy holds the whole disk; an overlay or a clone only what the job wrote (32M).
    assert!(mean_mib("local", "copy") >= 120.0);
    for (b, i) in [("local", "overlay"), ("nfs", "overlay"), ("rbd", "clone")] {
        assert!(
            mean_mib(b, i) < 0.6 * mean_mib("local", "copy"),
            "{b} {i}: {}",
            mean_mib(b, i)
        );
    }

    // The preset's next step: the ranking, every neighbouring pair ordered with an interval or
    // said not separable.
    let json = s.dir.path().join("recommend.json");
    let o = Command::new(env!("CARGO_BIN_EXE_vmbench"))
        .args(["recommend", &rec.run_id, "--for", "cloud-image", "--json"])
        .arg(&json)
        .arg("--html")
        .arg(s.dir.path().join("recommend.html"))
        .arg("--db")
        .arg(s.db())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let o = show(o);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("non-dominated"), "{text}");
    let page = std::fs::read_to_string(s.dir.path().join("recommend.html")).unwrap();
    assert_eq!(page.matches("<circle").count(), 4, "one point per layout");
    assert!(page.contains("95% CI ["), "intervals in the ranking table");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ranking = v["ranking"].as_array().unwrap();
    assert_eq!(ranking.len(), 4, "{v}");
    let objectives: Vec<&str> = (v["objectives"].as_array().unwrap().iter())
        .map(|o| o["objective"].as_str().unwrap_or(""))
        .collect();
    assert!(v["not_measured"].as_array().unwrap().is_empty(), "{v}");
    for r in &ranking[..ranking.len() - 1] {
        let pairs = r["versus_next"].as_array().unwrap();
        assert_eq!(pairs.len(), objectives.len(), "{r}");
        for f in pairs {
            match f["separation"].as_str().unwrap() {
                "ahead" => {
                    let ci = f["ci_pct"].as_array().expect("an interval");
                    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
                    assert!(
                        lo * hi > 0.0,
                        "an interval that excludes no difference: {f}"
                    );
                    assert!(f["text"].as_str().unwrap().contains('['), "{f}");
                }
                "not_separable" => {
                    assert!(f["text"].as_str().unwrap().contains("not separable"), "{f}")
                }
                "equal" => {}
                other => panic!("a pair neither ordered nor said not separable: {other}: {f}"),
            }
        }
    }
    s.assert_no_leftovers();
}
