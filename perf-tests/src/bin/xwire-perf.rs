//! xwire-perf: end-to-end perf scenarios on network namespaces, each run side by side
//! with its baselines, printing ratios.
//!
//!   xwire-perf local-fwd [--seconds 5] [--reps 3] [--sizes 64,1514] [--json]

use anyhow::Result;
use clap::{Parser, Subcommand};
use xwire_fastpath::{Direction, PortChoice, Worker, WorkerConfig};
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
    /// Run the switch as a device under test, linking two interfaces of the current
    /// network namespace, until killed or for --seconds (used by anchors/xwire-dut.sh, so
    /// that xwire is measured by the anchors' own generator and counters).
    Dut {
        /// The two interfaces to link, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ports: Vec<String>,
        /// CPU to pin the worker to.
        #[arg(long)]
        core: Option<usize>,
        /// Keep polling when idle.
        #[arg(long)]
        busy_poll: bool,
        /// Use AF_PACKET ports.
        #[arg(long)]
        af_packet: bool,
        /// Largest frame.
        #[arg(long, default_value_t = 1514)]
        max_frame: usize,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 3600.0)]
        seconds: f64,
    },
}

fn main() -> Result<()> {
    match Cli::parse().scenario {
        Scenario::Dut {
            ports,
            core,
            busy_poll,
            af_packet,
            max_frame,
            seconds,
        } => dut(&ports, core, busy_poll, af_packet, max_frame, seconds),
        scenario => local_fwd(scenario),
    }
}

fn dut(
    ports: &[String],
    core: Option<usize>,
    busy_poll: bool,
    af_packet: bool,
    max_frame: usize,
    seconds: f64,
) -> Result<()> {
    let [a_name, b_name] = ports else {
        anyhow::bail!("--ports takes two interfaces, e.g. --ports dut0,dut1");
    };
    let choice = if af_packet {
        PortChoice::AfPacket
    } else {
        PortChoice::AfXdp
    };
    let worker = Worker::spawn(WorkerConfig {
        core,
        busy_poll,
        ports: choice,
        ..Default::default()
    })?;
    let a = worker.add_port(a_name, max_frame)?;
    let b = worker.add_port(b_name, max_frame)?;
    let counters = worker.add_link(1, a.id, b.id)?;
    eprintln!(
        "xwire dut: {} ({}) <-> {} ({})",
        a.ifname,
        a.kind.name(),
        b.ifname,
        b.kind.name()
    );
    std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
    eprintln!(
        "a->b {:?}\nb->a {:?}",
        counters.snapshot(Direction::AToB),
        counters.snapshot(Direction::BToA)
    );
    Ok(())
}

fn local_fwd(scenario: Scenario) -> Result<()> {
    let Scenario::LocalFwd {
        seconds,
        reps,
        sizes,
        json,
        latency,
    } = scenario
    else {
        unreachable!("called for local-fwd only")
    };
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
