//! report.md (tables), report.json (raw samples) and SVG charts.
use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use anyhow::Context as _;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::{
    floor, profile,
    stats::{summarise, Sample, Summary},
    tax,
};

/// Everything one run produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Report {
    /// Machine, kernel, command, steal.
    pub environment: BTreeMap<String, String>,
    /// Raw samples.
    pub samples: Vec<Sample>,
    /// Memory and other single measurements.
    pub memory: BTreeMap<String, serde_json::Value>,
}

/// Every mode, in report order.
pub(super) const MODES: [&str; 5] = [
    "direct",
    "explicit",
    "ebpf",
    "iptables-legacy",
    "iptables-nft",
];

/// The rows of a table: every mode, the eBPF path's daemon part on its own (its socket,
/// without the plugin's exec) and the floor of an exec-based path (an exec of `true`).
const ROWS: [&str; 7] = [
    "direct",
    "explicit",
    "ebpf",
    "ebpf: daemon socket",
    "floor: exec of true",
    "iptables-legacy",
    "iptables-nft",
];

/// The report's tables of single figures: the keys starting with a prefix, under a title and an
/// intro, the prefix cut from the shown key unless `shown`. What no prefix takes goes to
/// "Memory".
const SECTIONS: [(&str, &str, &str, bool); 3] = [
    (
        floor::PREFIX,
        "The capture's floor",
        "What the hooks' own run time over the churn (`bpf_stats`) allows against the explicit \
        hop of this run, and what the capture's whole cost allows (eBPF's CPU per connection \
        over explicit's in the same rounds): at full concurrency conn/s scales with 1 / CPU per \
        connection, at c=1 with 1 / latency. `bpf_stats` times the programs' instructions only; \
        the kernel's work around each run and the release of socket storage lie outside it, so \
        its floor is an upper bound.",
        false,
    ),
    (
        tax::PREFIX,
        "The node's other sockets",
        "A client and a server in namespaces no policy covers, in a cgroup below the node \
        datapath's attach point (as every process of a node is below the root), against the \
        same pair with nothing attached, interleaved in the same rounds.",
        true,
    ),
    (
        profile::PREFIX,
        "Where the capture's kernel cost goes (`--profile`)",
        "`perf record -a -g` over short connections of the eBPF pod and of the explicit hop in \
        turn (`bpf_stats` off, as in production). Busy samples per connection give each mode's \
        whole CPU per connection; every eBPF sample whose call chain runs through one of our \
        hooks, or through the release of socket storage, is sorted by hook and by where it was, \
        as microseconds per connection.",
        false,
    ),
];

fn groups(samples: &[Sample]) -> Vec<((String, String), Vec<&Sample>)> {
    let mut order: Vec<(String, String)> = Vec::new();
    for s in samples {
        let k = (s.workload.clone(), s.variant.clone());
        if !order.contains(&k) {
            order.push(k);
        }
    }
    order
        .into_iter()
        .map(|k| {
            let v = samples
                .iter()
                .filter(|s| s.workload == k.0 && s.variant == k.1)
                .collect();
            (k, v)
        })
        .collect()
}

/// [`ROWS`] first, then any other mode of the group (the scaling workloads' rows: one per
/// program, per namespace count) in the order they first appear.
fn rows_of<'a>(samples: &[&'a Sample]) -> Vec<&'a str> {
    let mut rows: Vec<&str> = ROWS
        .iter()
        .copied()
        .filter(|r| samples.iter().any(|s| s.mode == *r))
        .collect();
    let extra: Vec<&'a str> = samples.iter().map(|s| s.mode.as_str()).collect();
    for m in extra {
        if !rows.contains(&m) {
            rows.push(m);
        }
    }
    rows
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{r:.3}"))
}

/// Renders report.md.
pub(super) fn markdown(report: &Report) -> String {
    let mut out = String::from("# Benchmark report\n\n");
    for (k, v) in &report.environment {
        let _ = writeln!(out, "- {k}: {v}");
    }
    let errors: u64 = report.samples.iter().map(|s| s.errors).sum();
    if errors > 0 {
        let _ = writeln!(
            out,
            "\n**Warning: {errors} failed connections during the run; rates exclude them.**"
        );
    }
    out.push_str(
        "\nMedians over interleaved rounds; ratios are medians of per-round ratios (value \
        / reference in the same round). For latencies and enrollment time lower is better, so a \
        ratio below 1 is a win there.\n",
    );
    for ((workload, variant), samples) in groups(&report.samples) {
        let unit = samples.first().map(|s| s.unit.clone()).unwrap_or_default();
        let _ = writeln!(out, "\n## {workload} ({variant}), {unit}\n");
        out.push_str(
            "| mode | n | median | p99 | min-max | / explicit | / iptables-legacy | CPU ms \
            per 1,000 conns |\n|---|---|---|---|---|---|---|---|\n",
        );
        for s in summarise(&samples, &rows_of(&samples)) {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.1} | {:.1}-{:.1} | {} | {} | {} |",
                s.mode,
                s.n,
                s.median,
                s.p99,
                s.min,
                s.max,
                fmt_ratio(s.ratio_explicit),
                fmt_ratio(s.ratio_iptables_legacy),
                s.cpu_per_1000
                    .map_or_else(|| "-".into(), |c| format!("{c:.1}"))
            );
        }
    }
    let mut rest: Vec<_> = report.memory.iter().collect();
    for (prefix, title, intro, shown) in SECTIONS {
        let (rows, others): (Vec<_>, Vec<_>) =
            rest.into_iter().partition(|(k, _)| k.starts_with(prefix));
        rest = others;
        section(
            &mut out,
            title,
            intro,
            if shown { "" } else { prefix },
            &rows,
        );
    }
    section(&mut out, "Memory", "", "", &rest);
    out
}

/// A `## TITLE` section of `rows` (keys shown without `prefix`) after an `intro` paragraph;
/// nothing when there are no rows.
fn section(
    out: &mut String,
    title: &str,
    intro: &str,
    prefix: &str,
    rows: &[(&String, &serde_json::Value)],
) {
    if rows.is_empty() {
        return;
    }
    let _ = write!(out, "\n## {title}\n\n");
    if !intro.is_empty() {
        let _ = write!(out, "{intro}\n\n");
    }
    out.push_str("| what | value |\n|---|---|\n");
    for (k, v) in rows {
        let _ = writeln!(out, "| {} | {v} |", k.strip_prefix(prefix).unwrap_or(k));
    }
}

fn bar_chart(path: &Path, title: &str, unit: &str, bars: &[(String, f64)]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((0..bars.len()).into_segmented(), 0.0..max)?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(unit)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(i) => labels.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .draw()?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), *v),
            ],
            Palette99::pick(i).filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        bar
    }))?;
    chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
        Text::new(
            format!("{v:.0}"),
            (SegmentValue::CenterOf(i), *v),
            ("sans-serif", 14),
        )
    }))?;
    root.present()?;
    Ok(())
}

fn line_chart(
    path: &Path,
    title: &str,
    unit: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let max_y = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.15;
    let max_x = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..max_x * 1.5).log_scale(), 0.0..max_y)?;
    chart
        .configure_mesh()
        .x_desc("exclusion rules (0 plotted at 1)")
        .y_desc(unit)
        .draw()?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i + 2).to_rgba();
        let pts: Vec<(f64, f64)> = points.iter().map(|(x, y)| (x.max(1.0), *y)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Writes report.md, report.json and the charts into `dir`.
pub(super) fn write(report: &Report, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(report)?,
    )?;
    std::fs::write(dir.join("report.md"), markdown(report))?;
    for ((workload, variant), samples) in groups(&report.samples) {
        if workload == "rules" {
            continue;
        }
        let sums: Vec<Summary> = summarise(&samples, &ROWS);
        let bars: Vec<(String, f64)> = sums.iter().map(|s| (s.mode.clone(), s.median)).collect();
        let unit = samples.first().map(|s| s.unit.clone()).unwrap_or_default();
        let stem: String = format!("{workload}-{variant}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let file = format!("{stem}.svg");
        bar_chart(
            &dir.join(file),
            &format!("{workload} ({variant}), median"),
            &unit,
            &bars,
        )?;
    }
    let rules: Vec<&Sample> = report
        .samples
        .iter()
        .filter(|s| s.workload == "rules")
        .collect();
    if !rules.is_empty() {
        let mut series = Vec::new();
        for mode in MODES {
            let mut points = Vec::new();
            for ((_, variant), samples) in groups(&report.samples)
                .into_iter()
                .filter(|g| g.0 .0 == "rules")
            {
                let n: f64 = variant.trim_start_matches("rules=").parse().unwrap_or(0.0);
                if let Some(s) = summarise(&samples, &[mode]).first() {
                    points.push((n, s.median));
                }
            }
            if !points.is_empty() {
                series.push((mode.to_owned(), points));
            }
        }
        line_chart(
            &dir.join("rules.svg"),
            "short connections/s vs exclusion rules",
            "conn/s",
            &series,
        )?;
    }
    Ok(())
}

/// Reads a report.json back (the smoke test checks it parses and has every mode).
pub(super) fn read(dir: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(dir.join("report.json")).context("reading report.json")?;
    Ok(serde_json::from_str(&text)?)
}

/// Checks a report has samples from every mode and parses; used by `cargo xtask test`.
pub(crate) fn check(out: &Path) -> anyhow::Result<usize> {
    let report = read(out)?;
    for mode in MODES {
        let n = report
            .samples
            .iter()
            .filter(|s| s.mode == mode && s.workload == "cps")
            .count();
        if n == 0 {
            anyhow::bail!("bench smoke: mode {mode} produced no samples");
        }
    }
    for w in [
        "cps",
        "keepalive-rps",
        "bulk",
        "rules",
        "enroll",
        "cni-add",
        super::boot::WORKLOAD,
        "load",
        "namespaces",
        super::cri::WORKLOAD,
    ] {
        if !report.samples.iter().any(|s| s.workload == w) {
            anyhow::bail!("bench smoke: workload {w} produced no samples");
        }
    }
    Ok(report.samples.len())
}
