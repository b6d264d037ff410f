//! The chart `lab bench` writes: per wire, A -> B alone, the loss-free rate (Mpps, with
//! what full offered load delivered behind it) on the left and latency at a low rate (p50
//! and p99, µs) on the right, as a PNG.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use plotters::coord::ranged1d::SegmentedCoord;
use plotters::coord::types::{RangedCoordf64, RangedCoordi32};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::bench::WireBench;

/// The font the chart's text is drawn in (Debian's fonts-dejavu-core).
const FONT_FILE: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT: &str = "sans-serif";

fn register_font() -> Result<()> {
    static REGISTERED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_FILE)
                .map_err(|e| format!("{FONT_FILE}: {e} (install fonts-dejavu-core)"))?;
            // plotters keeps registered fonts for the life of the program.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_FILE} is not a font plotters can read"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

/// The end of a panel's axis: a little past the largest value, and never zero.
fn top(values: impl Iterator<Item = f64>, least: f64) -> f64 {
    values.fold(0.0_f64, f64::max).max(least) * 1.15
}

type Panel<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<RangedCoordf64, SegmentedCoord<RangedCoordi32>>,
>;

/// One half of the chart: a bar per wire, from 0 to `top`, with the wires' labels.
fn panel<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, Shift>,
    caption: &str,
    top: f64,
    rows: i32,
    label: &dyn Fn(&SegmentValue<i32>) -> String,
) -> Result<Panel<'a, 'b>, Box<dyn std::error::Error>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 18))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(120)
        .build_cartesian_2d(0.0..top, (0..rows).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_label_formatter(label)
        .label_style((FONT, 13))
        .draw()?;
    Ok(chart)
}

pub fn write(lab: &str, results: &[WireBench], path: &Path) -> Result<()> {
    register_font()?;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let root =
            BitMapBackend::new(path, (1200, 160 + 60 * results.len() as u32)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled(&format!("xwire lab {lab}: every wire, A -> B"), (FONT, 24))?;
        let (left, right) = root.split_horizontally(600);
        let labels: Vec<String> = results
            .iter()
            .map(|r| format!("{} {}", r.uid, r.endpoints[0]))
            .collect();
        let rows = results.len() as i32;
        let label = |y: &SegmentValue<i32>| match y {
            SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        };
        // A bar across its wire's row, less a margin above and below.
        let bar =
            |row: usize, length: f64, style: ShapeStyle| -> Rectangle<(f64, SegmentValue<i32>)> {
                let row = row as i32;
                let corners = [
                    (0.0, SegmentValue::Exact(row)),
                    (length, SegmentValue::Exact(row + 1)),
                ];
                let mut rectangle = Rectangle::new(corners, style);
                rectangle.set_margin(6, 6, 0, 0);
                rectangle
            };

        let lossfree = |r: &WireBench| r.a_to_b().map_or(0.0, |d| d.lossfree_pps / 1e6);
        let full_rate = |r: &WireBench| r.a_to_b().map_or(0.0, |d| d.peak_delivered_pps / 1e6);
        let top_mpps = top(results.iter().map(|r| lossfree(r).max(full_rate(r))), 0.001);
        let mut chart = panel(
            &left,
            "loss-free rate (Mpps); full offered load light",
            top_mpps,
            rows,
            &label,
        )?;
        chart.draw_series(
            (results.iter().enumerate())
                .map(|(i, r)| bar(i, full_rate(r), BLUE.mix(0.25).filled())),
        )?;
        chart.draw_series(
            (results.iter().enumerate()).map(|(i, r)| bar(i, lossfree(r), BLUE.mix(0.8).filled())),
        )?;

        let top_us = top(results.iter().map(|r| r.latency.p99_us), 1.0);
        let mut chart = panel(
            &right,
            "latency (µs): p50 dark, p99 light",
            top_us,
            rows,
            &label,
        )?;
        chart.draw_series(
            (results.iter().enumerate())
                .map(|(i, r)| bar(i, r.latency.p99_us, RED.mix(0.3).filled())),
        )?;
        chart.draw_series(
            (results.iter().enumerate())
                .map(|(i, r)| bar(i, r.latency.p50_us, RED.mix(0.8).filled())),
        )?;
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow!("{e}"))
        .with_context(|| format!("write the chart {}", path.display()))
}
