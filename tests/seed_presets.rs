//! Issue 26 item 5: a write-up's preset end to end, then `report --against-seed` on its run, as
//! the README gives them. `longhorn-localpv-openebs`, shortened (the only changes, all CI sizes
//! from tests/common): a 4 s job after 1 s of ramp instead of 60 s, a 32M test file instead of
//! 200M, 384 MiB guests instead of 512, 128 MiB disks. Kept: Longhorn as ext4 on an iSCSI LUN,
//! Local PV and OpenEBS as one host directory (virtio-fs), fio buffered (`direct=0`) on a file,
//! 3 repeats. Shortened, the run is not the preset's: `--against-seed` refuses it (exit 2, naming
//! the differing parameters) and judges it with `--force`; then every conclusion is judged or
//! says why not, and the Local PV / OpenEBS ones say that one cell stands for both.
use crate::common;
use common::*;

const PRESET: &str = "longhorn-localpv-openebs";

/// `vmbench report last --against-seed PRESET` on the scratch's store, plus `extra`.
fn against(s: &Scratch, extra: &[&str]) -> (Option<i32>, String, String) {
    report_against_seed("last", Some(&s.db()), PRESET, extra)
}

/// Each conclusion of the report's judged section with its verdict lines (`[...] PAIR`).
fn conclusions(report: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let section = report
        .lines()
        .skip_while(|l| !l.starts_with("Conclusions of the write-up"))
        .skip(1)
        .take_while(|l| l.starts_with("  "));
    for line in section {
        if !line.starts_with("   ") {
            out.push((line.trim().to_string(), vec![]));
        } else if line.trim_start().starts_with('[') {
            out.last_mut().unwrap().1.push(line.trim().to_string());
        }
    }
    out
}

#[test]
#[ignore = "host: root libvirtd qemu tgtd"]
fn the_longhorn_preset_runs_and_every_conclusion_is_judged_or_says_why_not() {
    let s = Scratch::new();
    let out = s.matrix(&["--preset", PRESET, "--no-probe"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "preset {PRESET}: next: vmbench report RUN --against-seed {PRESET}"
        )) || stderr.contains(&format!("--against-seed {PRESET}")),
        "{stderr}"
    );
    let (dir, rec) = s.run_record();
    for (backend, n) in [("iscsi", 3), ("hostdir", 3)] {
        let cells: Vec<_> = (rec.cells.iter())
            .filter(|c| c.cell.backend.as_str() == backend)
            .collect();
        assert_eq!(cells.len(), n, "{backend}: 3 repeats");
        for c in cells {
            assert!(passed(c), "{}: {:?}", c.cell_id, c.outcome);
            assert_eq!(c.cell.layout.as_str(), "ext4", "{}", c.cell_id);
            assert_eq!(c.cell.job.direct, Some(0), "{}", c.cell_id);
        }
    }
    let job = std::fs::read_dir(dir.join("cells"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path().join("job.fio")).unwrap())
        .next()
        .unwrap();
    assert!(
        job.contains("\ndirect=0\n") && !job.contains("direct=1"),
        "{job}"
    );

    // Shortened, it is not the preset's run.
    let (code, text, err) = against(&s, &[]);
    assert_eq!(code, Some(2), "{text}\n{err}");
    assert!(
        err.contains(&format!("was not made by preset {PRESET}")),
        "{err}"
    );
    assert!(err.contains("runtime"), "{err}");

    let (code, text, err) = against(&s, &["--force"]);
    assert_eq!(code, Some(0), "{err}");
    let judged = conclusions(&text);
    assert_eq!(judged.len(), 7, "{text}");
    let allowed = [
        "[holds]",
        "[does not hold]",
        "[inconclusive]",
        "[not judged (one cell stands for both)]",
    ];
    for (conclusion, verdicts) in &judged {
        assert_eq!(verdicts.len(), 1, "{conclusion}:\n{text}");
        let v = &verdicts[0];
        assert!(
            allowed.iter().any(|a| v.starts_with(a)),
            "{conclusion}: {v}\n{text}"
        );
        let same = conclusion.contains("OpenEBS") && conclusion.contains("Local PV");
        assert_eq!(
            v.starts_with("[not judged (one cell stands for both)]"),
            same,
            "{conclusion}: {v}"
        );
    }
    assert!(text.contains("n = 3 + 3"), "{text}");
    assert!(text.contains("95% CI"), "{text}");
    assert!(text.contains("ran under TCG"), "{text}");
    s.assert_no_leftovers();
}
