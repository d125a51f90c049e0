//! A run's figures in the OpenMetrics text exposition format (which Prometheus' text parser,
//! node_exporter's textfile collector and a Pushgateway also read): one gauge family per metric,
//! named `vmbench_<key>_<unit>` in base units (seconds, bytes, ratios), one sample per passed
//! cell and repeat, labelled with the cell's dimensions, the repeat, the host and the run.
//!
//! Values that are not numbers (`+++++`, not available) are left out: a gauge cannot say why.

use crate::results::{Better, CellResult, Outcome, RunRecord, Value};
use std::collections::BTreeMap;
use std::fmt::Write;

/// How a vmbench unit maps to an OpenMetrics base unit: the suffix the key carries for it, the
/// unit name, and the multiplier and divisor from the vmbench unit to it.
struct UnitMap {
    key_suffix: &'static str,
    unit: &'static str,
    mul: f64,
    div: f64,
}

/// vmbench's units and their base units. Prometheus wants seconds, bytes and ratios, not µs,
/// MiB and percent.
fn unit_map(unit: &str) -> Option<UnitMap> {
    let m = |key_suffix, unit, mul, div| {
        Some(UnitMap {
            key_suffix,
            unit,
            mul,
            div,
        })
    };
    match unit {
        "IOPS" => m("_iops", "iops", 1.0, 1.0),
        "MiB/s" => m("_mib_s", "bytes_per_second", 1_048_576.0, 1.0),
        "K/sec" => m("_kps", "bytes_per_second", 1024.0, 1.0),
        "/sec" => m("_ps", "per_second", 1.0, 1.0),
        "µs" => m("_us", "seconds", 1.0, 1e6),
        "ms" => m("_ms", "seconds", 1.0, 1e3),
        "s" => m("_s", "seconds", 1.0, 1.0),
        "%" => m("_pct", "ratio", 1.0, 100.0),
        "MiB" => m("_mib", "bytes", 1_048_576.0, 1.0),
        _ => None,
    }
}

/// `[a-zA-Z0-9_]` only, lower case, no doubled or trailing underscores.
fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = if c.is_ascii_alphanumeric() {
            c.to_ascii_lowercase()
        } else {
            '_'
        };
        if !(c == '_' && (out.is_empty() || out.ends_with('_'))) {
            out.push(c);
        }
    }
    out.trim_end_matches('_').to_string()
}

/// Family name, OpenMetrics unit (empty for none), and multiplier and divisor for values.
fn family(key: &str, unit: &str) -> (String, String, (f64, f64)) {
    match unit_map(unit) {
        Some(u) => {
            let stem = key.strip_suffix(u.key_suffix).unwrap_or(key);
            (
                format!("vmbench_{}_{}", sanitize(stem), u.unit),
                u.unit.to_string(),
                (u.mul, u.div),
            )
        }
        None if unit.is_empty() => (
            format!("vmbench_{}", sanitize(key)),
            String::new(),
            (1.0, 1.0),
        ),
        None => {
            let u = sanitize(unit);
            let stem = sanitize(key);
            let name = if stem.ends_with(&format!("_{u}")) {
                format!("vmbench_{stem}")
            } else {
                format!("vmbench_{stem}_{u}")
            };
            (name, u, (1.0, 1.0))
        }
    }
}

/// Escapes a label value: backslash, double quote and newline, as the format requires.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text: backslash and newline escaped; a double quote becomes a single one, because
/// OpenMetrics wants it escaped and Prometheus' text parser refuses `\"` in HELP.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "'")
}

/// The label set of one cell result, in a fixed order.
fn labels(run: &RunRecord, r: &CellResult) -> Vec<(&'static str, String)> {
    let c = &r.cell;
    let mut l = vec![
        ("run_id", run.run_id.clone()),
        ("host", r.provenance.host.clone()),
    ];
    // The `host` label is the provenance's (the machine, or `NAME (machine)` for a non-default
    // libvirt host), which already tells hosts apart; the dimension's name would be a second
    // `host` label, which the exposition format forbids.
    l.extend(c.dimensions().into_iter().filter(|(k, _)| *k != "host"));
    l.push(("repeat", r.repeat.to_string()));
    l
}

/// One gauge family being collected.
struct Family {
    help: String,
    unit: String,
    samples: Vec<String>,
}

/// The run as an OpenMetrics text exposition, ending in `# EOF`.
pub fn openmetrics(run: &RunRecord) -> String {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for r in run.cells.iter().filter(|r| r.outcome == Outcome::Passed) {
        let label_text: Vec<String> = labels(run, r)
            .into_iter()
            // An empty label value means "no such label" to Prometheus: leave it out.
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(&v)))
            .collect();
        let label_text = label_text.join(",");
        for m in &r.metrics {
            let Value::Number(v) = m.value else { continue };
            let (name, unit, (mul, div)) = family(&m.key, &m.unit);
            let v = tidy(v * mul / div);
            if !v.is_finite() {
                continue;
            }
            let f = families.entry(name.clone()).or_insert_with(|| Family {
                help: format!(
                    "{} (vmbench shows {}), {} is better",
                    m.label,
                    m.unit,
                    better_word(m.better)
                ),
                unit,
                samples: Vec::new(),
            });
            f.samples.push(format!("{name}{{{label_text}}} {v}"));
        }
    }
    let mut out = String::new();
    for (name, f) in &families {
        let _ = writeln!(out, "# TYPE {name} gauge");
        if !f.unit.is_empty() {
            let _ = writeln!(out, "# UNIT {name} {}", f.unit);
        }
        let _ = writeln!(out, "# HELP {name} {}", escape_help(&f.help));
        for s in &f.samples {
            out.push_str(s);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// Rounds to 12 significant digits, so a scaled value prints as `0.64270022`, not as the
/// binary noise of the division (`0.6427002199999999`); measurements carry far fewer digits.
fn tidy(v: f64) -> f64 {
    format!("{v:.11e}").parse().unwrap_or(v)
}

fn better_word(b: Better) -> &'static str {
    match b {
        Better::Higher => "higher",
        Better::Lower => "lower",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny parser for one sample line's label set: `name{k="v",...} value`.
    fn parse_labels(line: &str) -> Vec<(String, String)> {
        let body = &line[line.find('{').unwrap() + 1..line.rfind('}').unwrap()];
        let mut out = Vec::new();
        let mut chars = body.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            assert_eq!(chars.next(), Some('"'), "value opens with a quote");
            let mut val = String::new();
            loop {
                match chars.next().expect("unterminated value") {
                    '\\' => match chars.next().expect("dangling backslash") {
                        '\\' => val.push('\\'),
                        '"' => val.push('"'),
                        'n' => val.push('\n'),
                        other => panic!("invalid escape \\{other}"),
                    },
                    '"' => break,
                    '\n' => panic!("raw newline in a label value"),
                    c => val.push(c),
                }
            }
            out.push((key, val));
            if chars.peek() == Some(&',') {
                chars.next();
            }
        }
        out
    }

    #[test]
    fn label_escaping_round_trips() {
        for hostile in [
            "plain",
            "back\\slash",
            "quo\"te",
            "new\nline",
            "all \\\" \n three\\",
            "\\n literal",
            "",
        ] {
            let line = format!(
                "m{{a=\"{}\",b=\"{}\"}} 1",
                escape_label(hostile),
                escape_label("x")
            );
            assert!(!line[..line.len() - 2].contains('\n'), "{line:?}");
            let got = parse_labels(&line);
            assert_eq!(
                got,
                vec![("a".into(), hostile.into()), ("b".into(), "x".into())]
            );
        }
    }

    #[test]
    fn names_carry_base_units() {
        assert_eq!(
            family("read_lat_p99_us", "µs"),
            (
                "vmbench_read_lat_p99_seconds".into(),
                "seconds".into(),
                (1.0, 1e6)
            )
        );
        assert_eq!(family("read_iops", "IOPS").0, "vmbench_read_iops");
        assert_eq!(
            family("write_bw_mib_s", "MiB/s").0,
            "vmbench_write_bw_bytes_per_second"
        );
        assert_eq!(
            family("host_qemu_cpu_pct", "%").0,
            "vmbench_host_qemu_cpu_ratio"
        );
        assert_eq!(
            family("seq_out_block_kps", "K/sec").0,
            "vmbench_seq_out_block_bytes_per_second"
        );
        assert_eq!(family("odd-Key!", "").0, "vmbench_odd_key");
        assert_eq!(family("files", "widgets").0, "vmbench_files_widgets");
    }

    #[test]
    fn help_never_holds_a_quote_or_raw_newline() {
        assert_eq!(escape_help("a \"b\"\nc\\"), "a 'b'\\nc\\\\");
    }
}
