//! Did a run come from a seed preset? `report --against-seed` judges a write-up's conclusions
//! only on a run its preset made: the run's recorded command line is parsed again into the
//! matrix configuration it ran (by `cli::recorded_matrix_config`: library code takes no clap
//! structs), and every measurement parameter is compared with the preset's.
//!
//! Left out of the comparison, because they do not change what a cell measures: where things
//! live (`storage`: directories, servers, devices; `connect`, `hosts`, `host_pool_dirs`),
//! watchdogs and timeouts, the live display and the boot probe, and the repeat count (more
//! repeats only narrow the intervals; fewer than 3 make a verdict inconclusive on its own).

use crate::matrix::config::MatrixConfig;
use crate::matrix::presets::SeedPreset;

/// Configuration keys that are not measurement parameters (see the module comment).
const NOT_PARAMETERS: &[&str] = &[
    "storage",
    "connect",
    "hosts",
    "host_pool_dirs",
    "stall_timeout",
    "boot_timeout",
    "live_status",
    "probe",
    "repeat",
    "max_cv",
    "max_repeats",
];

/// One parameter where the run and the preset disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamDiff {
    /// The configuration key (`runtime`, `backend` ...).
    pub key: String,
    /// The run's value (compact JSON).
    pub run: String,
    /// The preset's value (compact JSON).
    pub preset: String,
}

impl std::fmt::Display for ParamDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: run {}, preset {}", self.key, self.run, self.preset)
    }
}

/// Where a run came from, as far as its record tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Every measurement parameter is the preset's.
    Preset,
    /// These parameters differ.
    Differs(Vec<ParamDiff>),
    /// The recorded command cannot be read back into a configuration.
    Unknown(String),
}

/// The origin of a run against `preset`, from the configuration its recorded command gives
/// (`cli::recorded_matrix_config`), or why there is none.
pub fn origin(ran: &Result<MatrixConfig, String>, preset: &SeedPreset) -> Origin {
    let ran = match ran {
        Ok(c) => c,
        Err(why) => return Origin::Unknown(why.clone()),
    };
    let mut expected = preset.config();
    // As `cli::matrix_config` does: without a device the preset's block system is listed as
    // not measured, not refused.
    expected
        .backend
        .retain(|b| !crate::storage::descriptor(*b).preset_needs_device(&ran.storage));
    let diffs = differences(ran, &expected);
    if diffs.is_empty() {
        Origin::Preset
    } else {
        Origin::Differs(diffs)
    }
}

/// The measurement parameters that differ between two configurations, by key.
pub fn differences(ran: &MatrixConfig, preset: &MatrixConfig) -> Vec<ParamDiff> {
    let as_map = |c: &MatrixConfig| match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => unreachable!("a MatrixConfig serializes to a JSON object"),
    };
    let (r, p) = (as_map(ran), as_map(preset));
    let null = serde_json::Value::Null;
    let mut keys: Vec<&String> = r.keys().chain(p.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| !NOT_PARAMETERS.contains(&k.as_str()))
        .filter_map(|k| {
            let (a, b) = (r.get(k).unwrap_or(&null), p.get(k).unwrap_or(&null));
            (a != b).then(|| ParamDiff {
                key: k.clone(),
                run: a.to_string(),
                preset: b.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::presets::seed_preset;
    use crate::results::RunRecord;

    fn origin(run: &RunRecord, p: &SeedPreset) -> Origin {
        super::origin(&crate::cli::recorded_matrix_config(&run.command), p)
    }

    fn run_with(command: &[&str]) -> RunRecord {
        let text = include_str!("../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json");
        let mut run: RunRecord = serde_json::from_str(text).unwrap();
        run.command = command.iter().map(|s| s.to_string()).collect();
        run
    }

    #[test]
    fn a_real_default_run_is_not_the_longhorn_preset_and_says_why() {
        // The fixture's own recorded command: a default-matrix run, local raw, 10 s.
        let text = include_str!("../../tests/fixtures/run-qemu-local-pgrandrw-bonnie.json");
        let run: RunRecord = serde_json::from_str(text).unwrap();
        let p = seed_preset("longhorn-localpv-openebs").unwrap();
        let Origin::Differs(d) = origin(&run, p) else {
            panic!("{:?}", origin(&run, p));
        };
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        for k in ["backend", "runtime", "memory_mib", "workload"] {
            assert!(keys.contains(&k), "{k} missing from {keys:?}");
        }
        let runtime = d.iter().find(|d| d.key == "runtime").unwrap();
        assert_eq!(runtime.to_string(), "runtime: run 10, preset 60");
    }

    #[test]
    fn the_preset_alone_or_with_more_repeats_and_paths_is_the_preset() {
        let p = seed_preset("lvm-vs-partition").unwrap();
        let run = run_with(&["vmbench", "matrix", "--preset", "lvm-vs-partition"]);
        assert_eq!(origin(&run, p), Origin::Preset);
        let run = run_with(&[
            "vmbench",
            "matrix",
            "--preset",
            "lvm-vs-partition",
            "--repeat",
            "5",
            "--runs-dir",
            "/var/tmp/r",
            "--db",
            "/var/tmp/db.sqlite",
        ]);
        assert_eq!(origin(&run, p), Origin::Preset);
        // Another preset's run is not this one's.
        let other = seed_preset("longhorn-localpv-openebs").unwrap();
        assert!(matches!(origin(&run, other), Origin::Differs(_)));
        // An override of the preset is a difference.
        let run = run_with(&[
            "vmbench",
            "matrix",
            "--preset",
            "lvm-vs-partition",
            "--memory",
            "192",
        ]);
        assert_eq!(
            origin(&run, p),
            Origin::Differs(vec![ParamDiff {
                key: "memory_mib".into(),
                run: "192".into(),
                preset: p.config().memory_mib.to_string(),
            }])
        );
    }

    #[test]
    fn a_command_that_is_not_a_matrix_run_is_unknown() {
        let p = seed_preset("lvm-vs-partition").unwrap();
        let run = run_with(&["vmbench", "runs"]);
        assert!(
            matches!(origin(&run, p), Origin::Unknown(w) if w.contains("not made by `vmbench matrix`"))
        );
        let run = run_with(&["vmbench", "matrix", "--no-such-flag"]);
        assert!(matches!(origin(&run, p), Origin::Unknown(w) if w.contains("does not parse")));
    }
}
