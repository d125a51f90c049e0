//! The comparison page (`vmbench compare --format html`) from two real A/A runs (local qcow2 and
//! raw, 5 repeats each, exported with `vmbench export`): summary first, one interval chart per
//! verdict row, information rows collapsed; and the same page in headless chromium.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use vmbench::compare::{compare, CompareOptions, Verdict};
use vmbench::report::compare_html::compare_html;
use vmbench::results::RunRecord;

fn exported_run(name: &str) -> RunRecord {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(doc["run"].clone()).unwrap()
}

fn real_page() -> (vmbench::compare::Comparison, String) {
    let a = exported_run("export-aa-rep5-a.json");
    let b = exported_run("export-aa-rep5-b.json");
    let cmp = compare(&a, &b, &CompareOptions::default());
    let html = compare_html(&cmp);
    (cmp, html)
}

fn pos(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("{needle} not in the page"))
}

fn check_page(page: &str, cmp: &vmbench::compare::Comparison) {
    let order = [
        "id=\"method\"",
        "id=\"summary\"",
        "id=\"verdicts\"",
        "id=\"info\"",
        "id=\"not-compared\"",
    ];
    let at: Vec<usize> = order.iter().map(|n| pos(page, n)).collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "sections in order: {at:?}"
    );
    let method = &page[at[0]..at[1]];
    assert!(
        method.contains("Holm") && method.contains("alpha 0.01") && method.contains("5% (default)")
    );
    // Counts match the rows' verdicts; an A/A pair has no regression.
    let verdict_rows = cmp.rows.iter().filter(|r| r.is_verdict_row()).count();
    let count = |class: &str| {
        let s = &page[pos(page, &format!("data-count=\"{class}\""))..];
        s[pos(s, ">") + 1..pos(s, "<")].parse::<usize>().unwrap()
    };
    let nochange = cmp
        .rows
        .iter()
        .filter(|r| r.verdict == Verdict::NoSignificantChange)
        .count();
    assert_eq!(count("nochange"), nochange);
    assert_eq!(count("regression"), 0);
    assert_eq!(
        count("regression")
            + count("improvement")
            + count("nochange")
            + count("inconclusive")
            + count("notcomparable"),
        verdict_rows
    );
    assert!(page[at[1]..at[2]].contains("No regression."));
    // One interval chart per verdict row, with the noise band and a CI line where there is one.
    let table = &page[at[2]..at[3]];
    assert_eq!(table.matches("data-verdict=").count(), verdict_rows);
    assert_eq!(table.matches("<svg class=\"ci\"").count(), verdict_rows);
    assert_eq!(table.matches("class=\"band\"").count(), verdict_rows);
    let with_ci = cmp
        .rows
        .iter()
        .filter(|r| r.is_verdict_row() && r.change_ci_pct.is_some())
        .count();
    assert_eq!(table.matches("class=\"interval\"").count(), with_ci);
    assert!(table.contains("n=5"), "n shown");
    // Information rows are collapsed.
    assert!(page[at[3]..at[4]].contains("<details>"));
}

#[test]
fn real_aa_comparison_page_reads_summary_first() {
    let (cmp, html) = real_page();
    assert!(
        cmp.rows.iter().any(|r| !r.is_verdict_row()),
        "fixture has info rows"
    );
    check_page(&html, &cmp);
}

#[test]
#[ignore = "host: chromium"]
fn chromium_renders_the_comparison_page() {
    if Command::new("chromium")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        return common::skip("chromium is not installed");
    }
    let (cmp, html) = real_page();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("compare.html");
    std::fs::write(&page, &html).unwrap();
    let out = common::output_within(
        Command::new("chromium")
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
            .arg(format!("file://{}", page.display())),
        common::TOOL_LIMIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    check_page(&dom, &cmp);
    let shot = dir.path().join("compare.png");
    let mut out = Command::new("chromium");
    out.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1400",
    ])
    .arg(format!("--screenshot={}", shot.display()))
    .arg(format!("file://{}", page.display()));
    let out = common::output_within(&mut out, common::TOOL_LIMIT);
    assert!(out.status.success());
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "screenshot shows something"
    );
}
