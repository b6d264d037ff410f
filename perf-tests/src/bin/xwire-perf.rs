//! xwire-perf: end-to-end perf scenarios on network namespaces, each run side by side
//! with its baselines, printing ratios.
//!
//!   xwire-perf local-fwd [--seconds 5] [--reps 3] [--sizes 64,1514] [--json]

use anyhow::Result;
use clap::{Parser, Subcommand};
use xwire_perf::local_fwd::{measure, median, Device, Row};

#[derive(Parser)]
#[command(
    name = "xwire-perf",
    about = "xwire perf scenarios with their baselines"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// gen-ns -> device -> sink-ns on one node: direct veth, Linux bridge, xwire.
    LocalFwd {
        /// Length of each measurement.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Repetitions; the median is reported.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Frame sizes.
        #[arg(long, value_delimiter = ',', default_value = "64,1514")]
        sizes: Vec<usize>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Add a latency pass at half of xwire's peak rate (see local_fwd.rs for its limits).
        #[arg(long)]
        latency: bool,
    },
}

fn main() -> Result<()> {
    let Scenario::LocalFwd {
        seconds,
        reps,
        sizes,
        json,
        latency,
    } = Cli::parse().scenario;
    let mut rows = Vec::new();
    for &size in &sizes {
        let mut xwire_pps = 0.0;
        for device in [Device::Direct, Device::Bridge, Device::Xwire] {
            let runs = (0..reps.max(1))
                .map(|_| measure(device, size, seconds, None))
                .collect::<Result<Vec<_>>>()?;
            let row = median(runs);
            if device == Device::Xwire {
                xwire_pps = row.delivered_pps;
            }
            emit(&row, json);
            rows.push(row);
        }
        if !latency {
            continue;
        }
        // Latency at half of xwire's peak rate, for every device.
        let rate = (xwire_pps / 2.0) as u64;
        for device in [Device::Direct, Device::Bridge, Device::Xwire] {
            let mut row = measure(device, size, seconds, Some(rate.max(1)))?;
            row.name = format!("{}@{}pps", row.name, rate);
            emit(&row, json);
            rows.push(row);
        }
    }
    if !json {
        println!("\nratios (delivered, same run):");
        for &size in &sizes {
            let get = |name: &str| {
                rows.iter()
                    .find(|r| r.name == name && r.frame_bytes == size)
            };
            if let (Some(x), Some(d), Some(b)) =
                (get("xwire"), get("direct-veth"), get("linux-bridge"))
            {
                println!(
                    "  {size} B: xwire/direct {:.2}  xwire/bridge {:.2}",
                    x.delivered_pps / d.delivered_pps,
                    x.delivered_pps / b.delivered_pps
                );
            }
        }
    }
    Ok(())
}

fn emit(row: &Row, json: bool) {
    if json {
        println!("{}", serde_json::to_string(row).expect("a row serialises"));
    } else {
        let us = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        println!(
            "{:<28} {:>5} B  offered {:>9.0} pps  delivered {:>9.0} pps  {:>6.2} Gbps  loss {:>6.2}%  p50 {:>6} us  p99 {:>6} us  dut cpu {:.2}",
            row.name,
            row.frame_bytes,
            row.offered_pps,
            row.delivered_pps,
            row.gbps,
            row.loss_ratio * 100.0,
            us(row.p50_us),
            us(row.p99_us),
            row.cpu_cores
        );
    }
}
