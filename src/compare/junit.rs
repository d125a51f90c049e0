//! JUnit XML for CI: one testcase per cell x metric, a regression is a `<failure>` whose message
//! carries the numbers, a broken cell is a `<failure>` of its own, an undecided or incomparable
//! metric or cell is `<skipped>`; what changed in the system under test is a suite property and
//! the suite's first output. Written with quick-xml so
//! every attribute and text is escaped; characters XML 1.0 cannot hold at all are dropped.

use super::table::{fmt_num, fmt_pct};
use super::{Comparison, MetricComparison, Verdict};
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;
use std::io::Cursor;

/// Renders the comparison as a JUnit document.
pub(super) fn render(c: &Comparison) -> String {
    let mut w = Writer::new_with_indent(Cursor::new(Vec::new()), b' ', 2);
    write_doc(&mut w, c).expect("writing XML to memory cannot fail");
    String::from_utf8(w.into_inner().into_inner()).expect("quick-xml writes UTF-8")
}

type W = Writer<Cursor<Vec<u8>>>;

fn write_doc(w: &mut W, c: &Comparison) -> std::io::Result<()> {
    let broken_failures = if c.allow_missing { 0 } else { c.broken.len() };
    let failures = c
        .rows
        .iter()
        .filter(|r| r.verdict == Verdict::Regression)
        .count()
        + broken_failures;
    let skipped = c
        .rows
        .iter()
        .filter(|r| {
            matches!(
                r.verdict,
                Verdict::NotComparable(_) | Verdict::Inconclusive(_)
            )
        })
        .count()
        + c.missing_cells.len()
        + c.unpassed_cells.len()
        + (c.broken.len() - broken_failures);
    let tests = c.rows.len() + c.missing_cells.len() + c.unpassed_cells.len() + c.broken.len();
    let counts = [
        ("tests", tests.to_string()),
        ("failures", failures.to_string()),
        ("errors", "0".to_string()),
        ("skipped", skipped.to_string()),
    ];
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    let name = clean(&format!(
        "vmbench compare {} -> {}",
        c.baseline_run, c.candidate_run
    ));
    let mut suites = BytesStart::new("testsuites");
    suites.push_attribute(("name", name.as_str()));
    counts
        .iter()
        .for_each(|(k, v)| suites.push_attribute((*k, v.as_str())));
    w.write_event(Event::Start(suites))?;
    let mut suite = BytesStart::new("testsuite");
    suite.push_attribute(("name", name.as_str()));
    counts
        .iter()
        .for_each(|(k, v)| suite.push_attribute((*k, v.as_str())));
    w.write_event(Event::Start(suite))?;
    write_what_changed(w, c)?;
    for b in &c.broken {
        write_broken(w, b, c.allow_missing)?;
    }
    for r in &c.rows {
        write_row(w, r)?;
    }
    for m in &c.missing_cells {
        write_skipped_cell(w, m, "cell present in only one run")?;
    }
    for u in &c.unpassed_cells {
        write_skipped_cell(w, u, "cell has no passed repeat on one side")?;
    }
    if let Some(line) = c.what_changed_line() {
        write_system_out(w, &clean(&line))?;
    }
    w.write_event(Event::End(BytesEnd::new("testsuite")))?;
    w.write_event(Event::End(BytesEnd::new("testsuites")))
}

/// The numbers of a row, in one sentence.
pub(crate) fn summary(r: &MetricComparison) -> String {
    let p = match (r.p_value, r.p_adjusted) {
        (Some(p), Some(a)) => format!("{} p={p:.4}, adjusted p={a:.4}", r.method),
        (Some(p), None) => format!("{} p={p:.4}", r.method),
        _ => "no test".into(),
    };
    format!(
        "{} {}: {} -> {} {} ({}, {p}, threshold {:.1}%, n={}/{}): {}",
        r.label,
        r.metric_label,
        fmt_num(r.baseline_mean),
        fmt_num(r.candidate_mean),
        r.unit,
        fmt_pct(r.change_pct),
        r.threshold_pct,
        r.n_baseline,
        r.n_candidate,
        r.verdict
    )
}

fn testcase(classname: &str, name: &str) -> BytesStart<'static> {
    let mut tc = BytesStart::new("testcase");
    tc.push_attribute(("classname", clean(&format!("vmbench.{classname}")).as_str()));
    tc.push_attribute(("name", clean(name).as_str()));
    tc.push_attribute(("time", "0"));
    tc
}

fn write_row(w: &mut W, r: &MetricComparison) -> std::io::Result<()> {
    w.write_event(Event::Start(testcase(&r.cell_id, &r.key)))?;
    let message = clean(&summary(r));
    match &r.verdict {
        Verdict::Regression => {
            let mut f = BytesStart::new("failure");
            f.push_attribute(("message", message.as_str()));
            f.push_attribute(("type", "regression"));
            w.write_event(Event::Start(f))?;
            w.write_event(Event::Text(BytesText::new(&message)))?;
            w.write_event(Event::End(BytesEnd::new("failure")))?;
        }
        Verdict::NotComparable(_) | Verdict::Inconclusive(_) => {
            let mut s = BytesStart::new("skipped");
            s.push_attribute(("message", message.as_str()));
            w.write_event(Event::Empty(s))?;
        }
        _ => write_system_out(w, &message)?,
    }
    if let Some(note) = &r.note {
        write_system_out(w, &clean(note))?;
    }
    w.write_event(Event::End(BytesEnd::new("testcase")))
}

/// The system-under-test changes as suite properties, before any testcase (the schema puts
/// `<properties>` first; the line itself is the suite's `<system-out>`, which comes last).
fn write_what_changed(w: &mut W, c: &Comparison) -> std::io::Result<()> {
    let mut props: Vec<(String, String)> = vec![
        ("family".into(), c.family.clone()),
        ("outcome".into(), c.summary_line()),
    ];
    props.extend(
        c.what_changed
            .iter()
            .map(|ch| (format!("what changed: {}", ch.what), ch.to_string())),
    );
    w.write_event(Event::Start(BytesStart::new("properties")))?;
    for (name, value) in &props {
        let mut p = BytesStart::new("property");
        p.push_attribute(("name", clean(name).as_str()));
        p.push_attribute(("value", clean(value).as_str()));
        w.write_event(Event::Empty(p))?;
    }
    w.write_event(Event::End(BytesEnd::new("properties")))
}

/// A broken cell: a failure (or, with `--allow-missing`, skipped) testcase of its own.
fn write_broken(w: &mut W, b: &super::BrokenCell, allowed: bool) -> std::io::Result<()> {
    w.write_event(Event::Start(testcase(&b.cell_id, "cell")))?;
    let message = clean(&b.to_string());
    if allowed {
        let mut s = BytesStart::new("skipped");
        s.push_attribute((
            "message",
            format!("allowed (--allow-missing): {message}").as_str(),
        ));
        w.write_event(Event::Empty(s))?;
    } else {
        let mut f = BytesStart::new("failure");
        f.push_attribute(("message", message.as_str()));
        f.push_attribute(("type", "broken"));
        w.write_event(Event::Start(f))?;
        w.write_event(Event::Text(BytesText::new(&message)))?;
        w.write_event(Event::End(BytesEnd::new("failure")))?;
    }
    w.write_event(Event::End(BytesEnd::new("testcase")))
}

fn write_system_out(w: &mut W, text: &str) -> std::io::Result<()> {
    w.write_event(Event::Start(BytesStart::new("system-out")))?;
    w.write_event(Event::Text(BytesText::new(text)))?;
    w.write_event(Event::End(BytesEnd::new("system-out")))
}

fn write_skipped_cell(w: &mut W, what: &str, why: &str) -> std::io::Result<()> {
    let id = what.split([' ', ':']).next().unwrap_or(what);
    w.write_event(Event::Start(testcase(id, "cell")))?;
    let mut s = BytesStart::new("skipped");
    s.push_attribute(("message", clean(&format!("{why}: {what}")).as_str()));
    w.write_event(Event::Empty(s))?;
    w.write_event(Event::End(BytesEnd::new("testcase")))
}

/// Drops characters XML 1.0 forbids even escaped (control characters from guest output).
fn clean(s: &str) -> String {
    s.chars()
        .filter(|&c| {
            matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{FFFE}' && c != '\u{FFFF}')
        })
        .collect()
}
