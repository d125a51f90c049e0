//! `compare --within RUN --along DIM=A,B`: an A/B inside one run, Firecracker's way. The two
//! sides are the cells of one run that differ only in one dimension (two QEMU builds with
//! `--emulator`, two backends, two formats ...); they ran interleaved in the same run, so no
//! night lies between them. The run is split into two records, paired cell by cell, and handed
//! to the same [`compare`](super::compare) as two runs: same statistics, same exit codes.

use crate::cell::Cell;
use crate::results::{CellResult, RunRecord};
use std::collections::BTreeMap;
use std::fmt;

/// Which dimension, and which of its values is the baseline (A) and the candidate (B).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Along {
    /// A name of [`Cell::DIMENSION_NAMES`].
    pub dimension: &'static str,
    /// A: the baseline side's value, as the dimension prints it.
    pub baseline: String,
    /// B: the candidate side's value.
    pub candidate: String,
}

/// Why `--along` cannot split the run (exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlongError {
    /// Not `DIM=A,B`.
    #[error("--along '{0}': expected DIMENSION=A,B (two values of one dimension), e.g. emulator=old,new")]
    Shape(String),
    /// Not a dimension.
    #[error("--along: unknown dimension '{got}' (valid: {})", Cell::DIMENSION_NAMES.join(", "))]
    UnknownDimension {
        /// What was given.
        got: String,
    },
    /// A compared with itself.
    #[error("--along {dimension}={value},{value}: a side compared with itself proves nothing")]
    SameValue {
        /// The dimension.
        dimension: &'static str,
        /// The value given twice.
        value: String,
    },
    /// A value no cell of the run has.
    #[error(
        "run {run} has no cell with {dimension}={value} (its values there: {})",
        present.join(", ")
    )]
    NotInRun {
        /// The run.
        run: String,
        /// The dimension.
        dimension: &'static str,
        /// The missing value.
        value: String,
        /// The values the run has.
        present: Vec<String>,
    },
    /// Both values are there, but no cell of one side has a partner on the other.
    #[error(
        "run {run}: no cell with {dimension}={a} has a partner with {dimension}={b} that \
         differs from it only in {dimension}"
    )]
    NoPairs {
        /// The run.
        run: String,
        /// The dimension.
        dimension: &'static str,
        /// A.
        a: String,
        /// B.
        b: String,
    },
}

impl std::str::FromStr for Along {
    type Err = AlongError;
    fn from_str(s: &str) -> Result<Along, AlongError> {
        let shape = || AlongError::Shape(s.to_string());
        let (dim, values) = s.split_once('=').ok_or_else(shape)?;
        let dim = dim.trim().replace('-', "_");
        let dimension = Cell::DIMENSION_NAMES
            .iter()
            .copied()
            .find(|d| *d == dim)
            .ok_or(AlongError::UnknownDimension { got: dim.clone() })?;
        let (a, b) = values.split_once(',').ok_or_else(shape)?;
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() || b.is_empty() || b.contains(',') {
            return Err(shape());
        }
        if a == b {
            return Err(AlongError::SameValue {
                dimension,
                value: a.to_string(),
            });
        }
        Ok(Along {
            dimension,
            baseline: a.to_string(),
            candidate: b.to_string(),
        })
    }
}

impl fmt::Display for Along {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={},{}", self.dimension, self.baseline, self.candidate)
    }
}

/// The run split along one dimension: the A side, the B side with each cell renamed to its A
/// partner (so the two records pair cell by cell), and what had no partner.
#[derive(Debug, Clone)]
pub struct Split {
    /// The A side's results, run id `RUN [DIM=A]`.
    pub baseline: RunRecord,
    /// The B side's results, each under its partner's cell, run id `RUN [DIM=B]`.
    pub candidate: RunRecord,
    /// Labels of the cells of either side without a partner (left out of the comparison).
    pub unpaired: Vec<String>,
}

impl Along {
    /// This cell's value of the dimension.
    fn value(&self, cell: &Cell) -> String {
        cell.dimensions()
            .into_iter()
            .find(|(k, _)| *k == self.dimension)
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    /// The cell's other dimensions: what must be equal for two cells to pair.
    fn rest(&self, cell: &Cell) -> Vec<(&'static str, String)> {
        let mut dims = cell.dimensions();
        dims.retain(|(k, _)| *k != self.dimension);
        dims
    }

    /// Splits `run` into the two sides (see [`Split`]).
    pub fn split(&self, run: &RunRecord) -> Result<Split, AlongError> {
        self.check_values(run)?;
        let side = |v: &str| -> BTreeMap<_, Vec<&CellResult>> {
            let mut m: BTreeMap<_, Vec<&CellResult>> = BTreeMap::new();
            for r in run.cells.iter().filter(|r| self.value(&r.cell) == v) {
                m.entry(self.rest(&r.cell)).or_default().push(r);
            }
            m
        };
        let (a, b) = (side(&self.baseline), side(&self.candidate));
        let mut split = Split {
            baseline: self.record(run, &self.baseline),
            candidate: self.record(run, &self.candidate),
            unpaired: vec![],
        };
        for (key, rs) in &a {
            let Some(partners) = b.get(key) else {
                split.unpaired.push(rs[0].cell.label());
                continue;
            };
            split.baseline.cells.extend(rs.iter().map(|r| (*r).clone()));
            split
                .candidate
                .cells
                .extend(partners.iter().map(|r| CellResult {
                    cell: rs[0].cell.clone(),
                    cell_id: rs[0].cell_id.clone(),
                    ..(*r).clone()
                }));
        }
        let lonely_b = b.iter().filter(|(k, _)| !a.contains_key(*k));
        split
            .unpaired
            .extend(lonely_b.map(|(_, rs)| rs[0].cell.label()));
        if split.baseline.cells.is_empty() {
            return Err(AlongError::NoPairs {
                run: run.run_id.clone(),
                dimension: self.dimension,
                a: self.baseline.clone(),
                b: self.candidate.clone(),
            });
        }
        Ok(split)
    }

    /// Both values occur in the run.
    fn check_values(&self, run: &RunRecord) -> Result<(), AlongError> {
        let mut present: Vec<String> = run.cells.iter().map(|r| self.value(&r.cell)).collect();
        present.sort();
        present.dedup();
        for v in [&self.baseline, &self.candidate] {
            if !present.contains(v) {
                return Err(AlongError::NotInRun {
                    run: run.run_id.clone(),
                    dimension: self.dimension,
                    value: v.clone(),
                    present: present.clone(),
                });
            }
        }
        Ok(())
    }

    /// An empty record for one side, named after the run and the side.
    fn record(&self, run: &RunRecord, value: &str) -> RunRecord {
        RunRecord {
            run_id: format!("{} [{}={value}]", run.run_id, self.dimension),
            started: run.started.clone(),
            command: run.command.clone(),
            cells: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::{Backend, EmulatorName};
    use crate::results::{Metric, Outcome};

    fn result(cell: Cell, repeat: u32, iops: f64) -> CellResult {
        let mut r = CellResult::new(cell, repeat, Outcome::Passed);
        let better = crate::results::Better::Higher;
        r.metrics
            .push(Metric::num("read_iops", "Read IOPS", "IOPS", better, iops));
        r
    }

    fn emu(name: &str, backend: Backend) -> Cell {
        Cell {
            emulator: name.parse::<EmulatorName>().unwrap(),
            backend,
            ..Cell::default()
        }
    }

    fn run() -> RunRecord {
        let mut cells = vec![];
        for rep in 0..3 {
            for (e, b, v) in [
                ("a", Backend::Local, 100.0),
                ("b", Backend::Local, 50.0),
                ("a", Backend::Nfs, 80.0),
                ("b", Backend::Nfs, 80.0),
                ("c", Backend::Local, 1.0),
                ("a", Backend::Iscsi, 70.0),
            ] {
                cells.push(result(emu(e, b), rep, v + rep as f64));
            }
        }
        RunRecord {
            run_id: "R1".into(),
            started: String::new(),
            command: vec![],
            cells,
        }
    }

    #[test]
    fn parses_dimension_and_two_values_or_says_what_is_valid() {
        let a: Along = "emulator=old,new".parse().unwrap();
        assert_eq!(a.dimension, "emulator");
        assert_eq!((a.baseline.as_str(), a.candidate.as_str()), ("old", "new"));
        assert_eq!(a.to_string(), "emulator=old,new");
        assert_eq!(
            "xen-mode=pvh,hvm".parse::<Along>().unwrap().dimension,
            "xen_mode"
        );
        for bad in [
            "emulator",
            "emulator=a",
            "emulator=a,b,c",
            "emulator=,b",
            "=a,b",
        ] {
            assert!(
                matches!(
                    bad.parse::<Along>(),
                    Err(AlongError::Shape(_) | AlongError::UnknownDimension { .. })
                ),
                "{bad}"
            );
        }
        let e = "colour=red,blue".parse::<Along>().unwrap_err().to_string();
        assert!(
            e.contains("unknown dimension 'colour'") && e.contains("emulator"),
            "{e}"
        );
        let e = "backend=nfs,nfs".parse::<Along>().unwrap_err();
        assert!(matches!(e, AlongError::SameValue { .. }), "{e}");
    }

    #[test]
    fn pairs_cells_that_differ_only_in_the_dimension() {
        let s = "emulator=a,b"
            .parse::<Along>()
            .unwrap()
            .split(&run())
            .unwrap();
        assert_eq!(s.baseline.run_id, "R1 [emulator=a]");
        assert_eq!(s.candidate.run_id, "R1 [emulator=b]");
        // local and nfs pair (3 repeats each); iscsi has no b, c is neither side.
        assert_eq!(s.baseline.cells.len(), 6);
        assert_eq!(s.candidate.cells.len(), 6);
        assert_eq!(s.unpaired, vec![emu("a", Backend::Iscsi).label()]);
        // The candidate's results carry their partner's cell, so ids pair; values stay B's.
        for (a, b) in s.baseline.cells.iter().zip(&s.candidate.cells) {
            assert_eq!(a.cell_id, b.cell_id);
        }
        let b_local: Vec<f64> = s
            .candidate
            .cells
            .iter()
            .filter(|r| r.cell.backend == Backend::Local)
            .map(|r| r.metrics[0].value.number().unwrap())
            .collect();
        assert_eq!(b_local, vec![50.0, 51.0, 52.0]);
    }

    #[test]
    fn a_value_not_in_the_run_or_no_partner_is_an_error() {
        let e = "emulator=a,z"
            .parse::<Along>()
            .unwrap()
            .split(&run())
            .unwrap_err();
        assert!(e.to_string().contains("no cell with emulator=z"), "{e}");
        assert!(e.to_string().contains("a, b, c"), "{e}");
        let e = "emulator=c,a".parse::<Along>().unwrap();
        let mut r = run();
        r.cells
            .retain(|c| c.cell.backend != Backend::Local || c.cell.emulator.as_str() == "c");
        let e = e.split(&r).unwrap_err();
        assert!(matches!(e, AlongError::NoPairs { .. }), "{e}");
    }

    #[test]
    fn the_same_compare_decides_a_split_run() {
        let s = "backend=local,nfs".parse::<Along>().unwrap();
        let mut r = run();
        r.cells.retain(|c| c.cell.emulator.as_str() == "a");
        let split = s.split(&r).unwrap();
        let cmp = super::super::compare(&split.baseline, &split.candidate, &Default::default());
        assert_eq!(cmp.baseline_run, "R1 [backend=local]");
        assert!(cmp.rows.iter().any(|row| row.key == "read_iops"));
    }
}
