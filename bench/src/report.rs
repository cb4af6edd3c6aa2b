//! The report: one table per scenario (min / median / max over the runs), the targets as
//! ratios against references measured in the same run, machine facts, and two PNG plots.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::stats::{percentile, Spread};

/// One measured figure: its value in each run.
pub struct Figure {
    pub label: String,
    pub unit: &'static str,
    pub runs: Vec<f64>,
}

impl Figure {
    pub fn new(label: impl Into<String>, unit: &'static str, runs: Vec<f64>) -> Figure {
        Figure {
            label: label.into(),
            unit,
            runs,
        }
    }
}

/// A target and what this run measured against it.
pub struct Check {
    pub target: String,
    pub measured: String,
    pub pass: bool,
}

impl Check {
    /// `value` must be at least `at_least` (ratios, rates).
    pub fn at_least(target: &str, value: f64, at_least: f64, shown: String) -> Check {
        Check {
            target: target.into(),
            measured: shown,
            pass: value >= at_least,
        }
    }

    /// `value` must be at most `at_most` (latencies, memory, cost ratios).
    pub fn at_most(target: &str, value: f64, at_most: f64, shown: String) -> Check {
        Check {
            target: target.into(),
            measured: shown,
            pass: value <= at_most,
        }
    }
}

/// One scenario's section.
pub struct Section {
    pub title: String,
    pub how: String,
    pub figures: Vec<Figure>,
    pub checks: Vec<Check>,
}

/// Everything the run measured.
#[derive(Default)]
pub struct Report {
    pub machine: Vec<(String, String)>,
    pub sections: Vec<Section>,
    /// Throughput bars: label and runs, in plot order.
    pub bars: Vec<(String, Vec<f64>)>,
    /// Latency distributions in ms: label and samples.
    pub latencies: Vec<(String, Vec<f64>)>,
}

fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{:.0}", v)
    } else if v >= 10.0 {
        format!("{:.1}", v)
    } else {
        format!("{:.3}", v)
    }
}

impl Report {
    pub fn markdown(&self, command: &str) -> String {
        let mut md = String::new();
        let _ = writeln!(md, "# relayq benchmarks\n");
        let _ = writeln!(
            md,
            "Written by `{command}`. Every figure is min / median / max over the runs; targets are \
             checked on medians, and throughput targets are ratios against references measured \
             in the same run on the same machine, since absolute numbers move with the machine.\n"
        );
        let _ = writeln!(md, "## Machine\n\n| | |\n|---|---|");
        for (k, v) in &self.machine {
            let _ = writeln!(md, "| {k} | {v} |");
        }
        let passed = self
            .sections
            .iter()
            .flat_map(|s| &s.checks)
            .filter(|c| c.pass)
            .count();
        let total: usize = self.sections.iter().map(|s| s.checks.len()).sum();
        let _ = writeln!(md, "\n## Targets: {passed} of {total} met\n");
        let _ = writeln!(md, "| Scenario | Target | Measured | |\n|---|---|---|---|");
        for s in &self.sections {
            for c in &s.checks {
                let mark = if c.pass { "met" } else { "**missed**" };
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {mark} |",
                    s.title, c.target, c.measured
                );
            }
        }
        let _ = writeln!(
            md,
            "\n![throughput by scenario](bench/report/throughput.png)\n\n![latency distribution](bench/report/latency.png)\n"
        );
        for s in &self.sections {
            let _ = writeln!(md, "## {}\n\n{}\n", s.title, s.how);
            let _ = writeln!(
                md,
                "| Figure | Unit | Min | Median | Max | Runs |\n|---|---|---|---|---|---|"
            );
            for f in &s.figures {
                let sp = Spread::of(&f.runs);
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} |",
                    f.label,
                    f.unit,
                    number(sp.min),
                    number(sp.median),
                    number(sp.max),
                    f.runs.len()
                );
            }
            let _ = writeln!(md);
        }
        md
    }

    pub fn plot(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir)?;
        load_font()?;
        if !self.bars.is_empty() {
            self.plot_throughput(&dir.join("throughput.png"))?;
        }
        if !self.latencies.is_empty() {
            self.plot_latency(&dir.join("latency.png"))?;
        }
        Ok(())
    }

    fn plot_throughput(&self, path: &Path) -> Result<()> {
        let root = BitMapBackend::new(path, (1400, 700)).into_drawing_area();
        root.fill(&WHITE)?;
        let top = self
            .bars
            .iter()
            .flat_map(|(_, r)| r.iter().copied())
            .fold(1.0, f64::max)
            * 3.0;
        let names: Vec<String> = self.bars.iter().map(|(n, _)| n.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Throughput by scenario (messages/s, median; whiskers min..max)",
                ("sans-serif", 24),
            )
            .margin(20)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d(
                (0..self.bars.len()).into_segmented(),
                (100f64..top).log_scale(),
            )?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(self.bars.len())
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc("messages per second (log)")
            .label_style(("sans-serif", 15))
            .draw()?;
        for (i, (name, runs)) in self.bars.iter().enumerate() {
            let sp = Spread::of(runs);
            let color = if name.starts_with("relayq") {
                RGBColor(31, 119, 180)
            } else if name.starts_with("raw") {
                RGBColor(150, 150, 150)
            } else {
                RGBColor(255, 127, 14)
            };
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 100.0),
                    (SegmentValue::Exact(i + 1), sp.median),
                ],
                color.filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            chart.draw_series(std::iter::once(bar))?;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![
                    (SegmentValue::CenterOf(i), sp.min),
                    (SegmentValue::CenterOf(i), sp.max),
                ],
                BLACK.stroke_width(2),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{:.0}", sp.median),
                (SegmentValue::CenterOf(i), sp.max * 1.15),
                ("sans-serif", 15).into_font().color(&BLACK),
            )))?;
        }
        root.present()?;
        Ok(())
    }

    fn plot_latency(&self, path: &Path) -> Result<()> {
        let root = BitMapBackend::new(path, (1200, 700)).into_drawing_area();
        root.fill(&WHITE)?;
        let all = self.latencies.iter().flat_map(|(_, v)| v.iter().copied());
        let (lo, hi) = all.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
        let mut chart = ChartBuilder::on(&root)
            .caption("Latency distribution (cumulative)", ("sans-serif", 24))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(((lo * 0.8).max(0.001)..hi * 1.25).log_scale(), 0f64..100f64)?;
        chart
            .configure_mesh()
            .x_desc("milliseconds (log)")
            .y_desc("% of samples at or below")
            .label_style(("sans-serif", 15))
            .draw()?;
        let colors = [
            RGBColor(31, 119, 180),
            RGBColor(255, 127, 14),
            RGBColor(44, 160, 44),
        ];
        for ((name, samples), color) in self.latencies.iter().zip(colors.iter().cycle()) {
            let mut sorted = samples.clone();
            sorted.sort_by(f64::total_cmp);
            let step = (sorted.len() / 2000).max(1);
            let points: Vec<(f64, f64)> = sorted
                .iter()
                .enumerate()
                .step_by(step)
                .chain(std::iter::once((
                    sorted.len() - 1,
                    &sorted[sorted.len() - 1],
                )))
                .map(|(i, v)| (*v, 100.0 * (i + 1) as f64 / sorted.len() as f64))
                .collect();
            let label = format!(
                "{name} (p50 {} ms, p99 {} ms)",
                number(percentile(samples, 50.0)),
                number(percentile(samples, 99.0))
            );
            let c = *color;
            chart
                .draw_series(LineSeries::new(points, c.stroke_width(2)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()?;
        root.present()?;
        Ok(())
    }
}

/// Plot text needs a TrueType font; the DejaVu fonts are on Debian and most Linux systems.
fn load_font() -> Result<()> {
    const CANDIDATES: &[&str] = &[
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let bytes = CANDIDATES
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .context("no TrueType font for the plots; install one (Debian: apt-get install -y fonts-dejavu-core)")?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| anyhow::anyhow!("the font file could not be read as TrueType"))?;
    Ok(())
}
