//! Numbers as a reader sees them, in every output (tables, progress lines, reports).

/// A number for a reader: thousands separators from 1,000, fewer decimals for bigger numbers
/// (percentages keep two, as in the seed's "4.71%").
pub fn fmt_number(v: f64, unit: &str) -> String {
    let a = v.abs();
    let decimals = if unit == "%" {
        2
    } else if a >= 100.0 {
        0
    } else if a >= 10.0 {
        1
    } else {
        2
    };
    let s = format!("{v:.decimals$}");
    group_thousands(&s)
}

/// `1234567.8` -> `1,234,567.8`.
fn group_thousands(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

/// A value with its unit: `7,757 IOPS`, `4.71%`.
pub fn with_unit(v: f64, unit: &str) -> String {
    let n = fmt_number(v, unit);
    match unit {
        "" => n,
        "%" => format!("{n}%"),
        u => format!("{n} {u}"),
    }
}
