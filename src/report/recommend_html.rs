//! `vmbench recommend --html FILE`: the recommendation as one self-contained page. Reading
//! order as in the text: what was asked (workload, objectives, method), the non-dominated set,
//! the ranking with each cell's figures (mean, 95% interval, n) and each step against the next
//! cell (ahead by X% [lo, hi], or not separable), then a scatter of the first two weighted
//! objectives with every cell's 95% interval as error bars, the non-dominated cells filled.

use super::html::{direction, esc, figure, page, table, TableCell, PALETTE};
use crate::compare::recommend::{CellFigures, Figure, Recommendation};
use crate::compare::stats::student_t_quantile;
use crate::results::Better;
use std::fmt::Write;

/// The page.
pub fn render(r: &Recommendation) -> String {
    let title = format!("vmbench recommend: run {} ({})", r.run_id, r.workload);
    let mut body = format!("<h1>{}</h1>", esc(&title));
    let asked: Vec<String> = (r.objectives.iter())
        .map(|w| format!("{} x{}", w.objective.as_str(), w.weight))
        .collect();
    let _ = write!(
        body,
        "<p>Profile: {}. Objectives: {}. Method: {}.</p>",
        esc(r.profile.as_deref().unwrap_or("none")),
        esc(&asked.join(", ")),
        esc(&r.method)
    );
    for m in &r.not_measured {
        let _ = write!(
            body,
            "<p class=\"note\">{}: not measured in this run (needs {}).</p>",
            esc(m.objective.as_str()),
            esc(&m.needs)
        );
    }
    for n in &r.not_ranked {
        let _ = write!(
            body,
            "<p class=\"note\">{}: not ranked, {} passed repeats (3 needed).</p>",
            esc(&n.label),
            n.n
        );
    }
    for label in &r.baselines {
        let _ = write!(
            body,
            "<p class=\"note\">{}: not ranked, a host row (no guest): a baseline, not a \
             choice.</p>",
            esc(label)
        );
    }
    let _ = write!(
        body,
        "<h2>Non-dominated</h2><p id=\"non-dominated\">{}</p>",
        esc(&r.non_dominated.join(", "))
    );
    body.push_str("<h2>Ranking</h2>");
    body.push_str(&ranking_table(r));
    body.push_str(&scatter(r));
    page(&title, &body)
}

/// A figure's mean with its 95% interval over the repeats (Student's t), when n >= 2.
fn interval(f: &Figure) -> Option<(f64, f64)> {
    let sd = f.stddev?;
    if f.n < 2 {
        return None;
    }
    let half = student_t_quantile(0.975, (f.n - 1) as f64) * sd / (f.n as f64).sqrt();
    Some((f.mean - half, f.mean + half))
}

fn ranking_table(r: &Recommendation) -> String {
    let mut head = vec!["Rank".to_string(), "Cell".into(), "Score".into()];
    head.extend(r.objectives.iter().map(|w| w.objective.noun().to_string()));
    head.push("Against the next".into());
    let rows: Vec<Vec<TableCell>> = (r.ranking.iter())
        .map(|k| {
            let cell = r.cells.iter().find(|c| c.cell_id == k.cell_id);
            let mut row: Vec<TableCell> = vec![
                k.rank.to_string().into(),
                k.label.clone().into(),
                format!("{:.3}", k.score).into(),
            ];
            for w in &r.objectives {
                let f = cell.and_then(|c| c.figures.iter().find(|f| f.objective == w.objective));
                row.push(figure_cell(f));
            }
            let next: Vec<String> = k.versus_next.iter().map(|p| p.text.clone()).collect();
            row.push(next.join("; ").into());
            row
        })
        .collect();
    table("ranking", &head, &rows)
}

fn figure_cell(f: Option<&Figure>) -> TableCell {
    let Some(f) = f else {
        return "-".to_string().into();
    };
    let sub = match interval(f) {
        Some((lo, hi)) => format!("95% CI [{}, {}], n={}", num(lo), num(hi), f.n),
        None => format!("n={}", f.n),
    };
    TableCell {
        text: f.shown.clone(),
        sub: Some(sub),
        class: Some("num"),
        title: None,
    }
}

fn num(v: f64) -> String {
    crate::compare::table::fmt_num(v)
}

/// The first two weighted objectives against each other, one point per cell at its means, its
/// 95% intervals as bars; nothing when fewer than two objectives are weighed.
fn scatter(r: &Recommendation) -> String {
    let [x, y] = match &r.objectives[..] {
        [a, b, ..] => [a, b],
        _ => return String::new(),
    };
    let pick = |c: &CellFigures, o| c.figures.iter().find(|f| f.objective == o).cloned();
    let pts: Vec<(&CellFigures, Figure, Figure)> = (r.cells.iter())
        .filter_map(|c| Some((c, pick(c, x.objective)?, pick(c, y.objective)?)))
        .collect();
    if pts.is_empty() {
        return String::new();
    }
    let span = |fs: Vec<(f64, f64)>| {
        let lo = fs
            .iter()
            .map(|p| p.0)
            .fold(f64::INFINITY, f64::min)
            .min(0.0);
        let hi = fs.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        (lo, if hi > lo { hi * 1.05 } else { lo + 1.0 })
    };
    let bounds = |f: &Figure| interval(f).unwrap_or((f.mean, f.mean));
    let (x0, x1) = span(pts.iter().map(|p| bounds(&p.1)).collect());
    let (y0, y1) = span(pts.iter().map(|p| bounds(&p.2)).collect());
    let (w, h, m) = (640.0, 400.0, 60.0);
    let sx = |v: f64| m + (v - x0) / (x1 - x0) * (w - 2.0 * m);
    let sy = |v: f64| h - m - (v - y0) / (y1 - y0) * (h - 2.0 * m);
    let mut svg = axes(
        (w, h, m),
        &axis_label(x.objective.noun(), x.higher_is_better),
        &axis_label(y.objective.noun(), y.higher_is_better),
    );
    for (i, (c, fx, fy)) in pts.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let (px, py) = (sx(fx.mean), sy(fy.mean));
        if let Some((lo, hi)) = interval(fx) {
            let _ = write!(
                svg,
                "<line class=\"ci\" x1=\"{:.1}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"{colour}\"/>",
                sx(lo),
                sx(hi)
            );
        }
        if let Some((lo, hi)) = interval(fy) {
            let _ = write!(
                svg,
                "<line class=\"ci\" x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"{colour}\"/>",
                sy(lo),
                sy(hi)
            );
        }
        let fill = if r.non_dominated.contains(&c.label) {
            colour
        } else {
            "white"
        };
        let _ = write!(
            svg,
            "<circle data-cell=\"{id}\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\" fill=\"{fill}\" \
             stroke=\"{colour}\"><title>{label}: {xs}, {ys}</title></circle>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" font-size=\"11\">{label}</text>",
            id = esc(&c.cell_id),
            label = esc(&c.label),
            xs = esc(&fx.shown),
            ys = esc(&fy.shown),
            tx = px + 7.0,
            ty = py - 7.0,
        );
    }
    let caption = format!(
        "{} against {}: means with 95% intervals over the repeats; filled: non-dominated",
        y.objective.noun(),
        x.objective.noun()
    );
    figure("recommend-scatter", &caption, w, h, &svg)
}

/// The two axes of a `w` x `h` chart with margin `m`, and their labels.
fn axes((w, h, m): (f64, f64, f64), x_label: &str, y_label: &str) -> String {
    format!(
        "<line x1=\"{m}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"#333\"/>\
         <line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{b}\" stroke=\"#333\"/>\
         <text x=\"{cx}\" y=\"{ty}\" text-anchor=\"middle\">{xl}</text>\
         <text x=\"14\" y=\"{cy}\" transform=\"rotate(-90 14 {cy})\" text-anchor=\"middle\">{yl}</text>",
        b = h - m,
        r = w - m,
        cx = w / 2.0,
        ty = h - 15.0,
        cy = h / 2.0,
        xl = esc(x_label),
        yl = esc(y_label),
    )
}

fn axis_label(noun: &str, higher_is_better: bool) -> String {
    let better = if higher_is_better {
        Better::Higher
    } else {
        Better::Lower
    };
    format!("{noun} ({})", direction(better))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::objective::Objective;
    use crate::compare::recommend::{Ranked, Weighted};

    fn fig(o: Objective, mean: f64, sd: f64) -> Figure {
        Figure {
            objective: o,
            mean,
            stddev: Some(sd),
            n: 3,
            shown: format!("{mean}"),
        }
    }

    fn rec() -> Recommendation {
        let cell = |id: &str, a: f64, b: f64| CellFigures {
            cell_id: id.into(),
            label: id.into(),
            n: 3,
            figures: vec![
                fig(Objective::Iops, a, 10.0),
                fig(Objective::BootStormTime, b, 0.5),
            ],
        };
        let rank = |i: usize, id: &str| Ranked {
            rank: i,
            cell_id: id.into(),
            label: id.into(),
            score: 1.0 / i as f64,
            tied_with: None,
            reason: String::new(),
            versus_next: vec![],
        };
        Recommendation {
            run_id: "R".into(),
            workload: "first-write-4k".into(),
            profile: Some("cloud-image".into()),
            objectives: vec![
                Weighted {
                    objective: Objective::Iops,
                    weight: 2.0,
                    higher_is_better: true,
                },
                Weighted {
                    objective: Objective::BootStormTime,
                    weight: 1.0,
                    higher_is_better: false,
                },
            ],
            not_measured: vec![],
            method: "welch_log".into(),
            cells: vec![cell("a<1>", 500.0, 8.0), cell("b", 300.0, 9.0)],
            not_ranked: vec![],
            baselines: vec![],
            non_dominated: vec!["a<1>".into()],
            dominated: vec![],
            ranking: vec![rank(1, "a<1>"), rank(2, "b")],
        }
    }

    #[test]
    fn the_page_has_the_ranking_intervals_and_a_scatter_with_error_bars() {
        let page = render(&rec());
        assert!(page.contains("<table id=\"ranking\">"), "{page}");
        // 500 ± t(0.975, 2) x 10 / sqrt(3) = 500 ± 24.84
        assert!(page.contains("95% CI [475.2, 524.8], n=3"), "{page}");
        assert_eq!(page.matches("<circle").count(), 2);
        assert_eq!(
            page.matches("class=\"ci\"").count(),
            4,
            "x and y bars per cell"
        );
        // Escaped everywhere; the non-dominated cell filled, the other hollow.
        assert!(page.contains("a&lt;1&gt;") && !page.contains("a<1>"));
        assert!(page.contains("fill=\"white\""));
    }

    #[test]
    fn one_objective_draws_no_scatter() {
        let mut r = rec();
        r.objectives.truncate(1);
        assert!(!render(&r).contains("<circle"));
    }
}
