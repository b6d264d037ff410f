//! xwire-perf: end-to-end perf scenarios on network namespaces, each run side by side
//! with its baselines, printing ratios.
//!
//!   xwire-perf local-fwd [--seconds 5] [--reps 3] [--sizes 64,1514] [--devices ...] [--json]

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use xwire_fastpath::{Direction, PortChoice, Worker, WorkerConfig};
use xwire_perf::local_fwd::{idle, median_by, paced, peak, wake_floor, Device, Row};

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
    /// gen-ns -> device -> sink-ns on one node: direct veth, Linux bridge, DPDK testpmd,
    /// OVS with AF_XDP ports and xwire, at full speed, paced for latency, and idle.
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
        /// Devices to measure (direct-veth, linux-bridge, testpmd-af_xdp-io,
        /// ovs-netdev-afxdp, xwire; xwire-adaptive is measured idle only).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "direct-veth,linux-bridge,testpmd-af_xdp-io,ovs-netdev-afxdp,xwire"
        )]
        devices: Vec<String>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Skip the latency pass (paced at half of xwire's peak rate).
        #[arg(long)]
        no_latency: bool,
        /// Skip the idle pass (idle CPU, first frame after a silence).
        #[arg(long)]
        no_idle: bool,
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
    for port in [&a, &b] {
        eprintln!(
            "{} kernel drops {:?}",
            port.ifname,
            worker.kernel_drops(port.id)?
        );
    }
    Ok(())
}

fn local_fwd(scenario: Scenario) -> Result<()> {
    let Scenario::LocalFwd {
        seconds,
        reps,
        sizes,
        devices,
        json,
        no_latency,
        no_idle,
    } = scenario
    else {
        unreachable!("called for local-fwd only")
    };
    let devices = devices
        .iter()
        .map(|name| Device::parse(name).with_context(|| format!("unknown device {name}")))
        .collect::<Result<Vec<_>>>()?;
    let reps = reps.max(1);
    let mut rows = Vec::new();
    for &size in &sizes {
        let fits = |d: &&Device| size <= d.max_frame();
        for &device in devices.iter().filter(fits) {
            let runs = (0..reps)
                .map(|_| peak(device, size, seconds))
                .collect::<Result<Vec<_>>>()?;
            let row = median_by(runs, |r| r.delivered_pps);
            emit(&row, json);
            rows.push(row);
        }
        if !json {
            print_ratios(&rows, size);
        }
        if no_latency {
            continue;
        }
        // Latency at half of xwire's peak rate, for every device.
        let Some(xwire) = rows
            .iter()
            .find(|r| r.name == Device::Xwire.name() && r.frame_bytes == size)
        else {
            continue;
        };
        let rate = ((xwire.delivered_pps / 2.0) as u64).max(1);
        for &device in devices.iter().filter(fits) {
            let runs = (0..reps)
                .map(|_| paced(device, size, seconds, rate))
                .collect::<Result<Vec<_>>>()?;
            let row = median_by(runs, |r| r.p99_us.unwrap_or(0.0));
            emit(&row, json);
            rows.push(row);
        }
    }
    if !no_idle {
        let mut idle_devices = devices.clone();
        if devices.contains(&Device::Xwire) {
            idle_devices.push(Device::XwireAdaptive);
        }
        let silence = Duration::from_millis(100);
        let probes = 50;
        let floor = wake_floor(silence, probes);
        for row in std::iter::once(floor).chain(
            idle_devices
                .into_iter()
                .map(|device| idle(device, seconds, silence, probes)),
        ) {
            let row = row?;
            if json {
                println!("{}", serde_json::to_string(&row)?);
            } else {
                println!(
                    "{:<28} idle: cpu {:.3} cores; first frame after {} ms of silence: p50 {:.1} us  p99 {:.1} us  max {:.1} us ({} probes)",
                    row.name,
                    row.idle_cpu_cores,
                    row.silence_ms,
                    row.first_frame_p50_us,
                    row.first_frame_p99_us,
                    row.first_frame_max_us,
                    row.probes
                );
            }
        }
    }
    Ok(())
}

/// xwire's delivered rate over each baseline's, from this run's rows.
fn print_ratios(rows: &[Row], size: usize) {
    let Some(xwire) = rows
        .iter()
        .find(|r| r.name == Device::Xwire.name() && r.frame_bytes == size)
    else {
        return;
    };
    let ratios: Vec<String> = rows
        .iter()
        .filter(|r| r.frame_bytes == size && r.name != xwire.name && r.p99_us.is_none())
        .map(|r| format!("{} {:.2}", r.name, xwire.delivered_pps / r.delivered_pps))
        .collect();
    println!("  ratios at {size} B, xwire over: {}", ratios.join(", "));
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
