//! xwire-perf: end-to-end perf scenarios on network namespaces, each run side by side
//! with its baselines, printing ratios.
//!
//!   xwire-perf local-fwd [--seconds 5] [--reps 3] [--sizes 64,1514] [--devices ...] [--json]
//!   xwire-perf remote-wire [--seconds 5] [--reps 3] [--sizes 64,1514] [--paths ...] [--json]
//!   xwire-perf cni-scale [--pods 50] [--callers 1] [--steps] [--bin-dir DIR] [--json]
//!   xwire-perf impair [--reps 3] [--seconds 5] [--busy-poll] [--json]
//!   xwire-perf lab-size [--pods 3000,5000,10000] [--nodes 3,5,5] [--json]
//!   xwire-perf restart [--wires 10,100,1000] [--frames-per-port 256] [--bin-dir DIR] [--json]

#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use xwire_bench::traffic::Wait;
use xwire_bench::trial::Flow;
use xwire_fastpath::{Direction, PortChoice, Worker, WorkerConfig};
use xwire_perf::local_fwd::{self, idle, paced, peak, wake_floor, Device};
use xwire_perf::measure::{median_by, LossfreeRow, Row, SearchLength};
use xwire_perf::remote_wire::{self, Layout, Setup, WirePath};
use xwire_perf::tools::{self, Tool};
use xwire_perf::worker_settings::WorkerSettings;

#[derive(Parser)]
#[command(
    name = "xwire-perf",
    version,
    about = "xwire perf scenarios with their baselines"
)]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

/// What every scenario's run takes.
#[derive(clap::Args)]
struct RunArgs {
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
    /// Skip the full-speed pass (and the latency pass, which runs at half of its rate).
    #[arg(long)]
    no_peak: bool,
    /// Skip the latency pass (paced at half of xwire's peak rate).
    #[arg(long)]
    no_latency: bool,
    /// Skip the loss-free search (the highest rate with loss at or below 0.1%, per
    /// direction, alone and both at once; one search per run, not repeated).
    #[arg(long)]
    no_lossfree: bool,
    /// Seconds of each short trial of the loss-free search.
    #[arg(long, default_value_t = 1.0)]
    trial_seconds: f64,
    /// Seconds of the trial that confirms the rate the short trials found (the loss-free
    /// rate holds for this long); 0 lets the short trials decide.
    #[arg(long, default_value_t = 10.0)]
    confirm_seconds: f64,
    /// Directions of the loss-free search, in order.
    #[arg(long, value_enum, value_delimiter = ',', default_values = ["a-to-b", "b-to-a", "both"])]
    flows: Vec<Flow>,
    /// Skip the cost pass (the whole machine's CPU time per frame at --cost-rate).
    #[arg(long)]
    no_cost: bool,
    /// Offered rate of the cost pass, frames per second: below every device's peak, so
    /// that every device carries all of it.
    #[arg(long, default_value_t = 50_000)]
    cost_rate: u64,
    /// Name the Debian packages of missing tools (iperf3, dpdk-testpmd, Open vSwitch)
    /// instead of installing them with apt-get before the first measurement.
    #[arg(long)]
    no_install: bool,
}

impl RunArgs {
    fn search_length(&self) -> SearchLength {
        SearchLength {
            trial_seconds: self.trial_seconds,
            confirm_seconds: self.confirm_seconds,
        }
    }

    /// Runs `measure` `reps` times, prints the median row by `key`, and returns it.
    fn median(&self, measure: impl Fn() -> Result<Row>, key: impl Fn(&Row) -> f64) -> Result<Row> {
        let runs = (0..self.reps.max(1))
            .map(|_| measure())
            .collect::<Result<Vec<_>>>()?;
        let row = median_by(runs, key);
        emit(&row, self.json);
        Ok(row)
    }
}

/// How xwire's workers run: what `xwired` runs with unless one of these says otherwise.
#[derive(clap::Args)]
struct WorkerArgs {
    /// Keep xwire's workers polling without pause (the daemon's `busy_poll = true`).
    #[arg(long)]
    busy_poll: bool,
    /// Without --busy-poll: how long a worker keeps polling after its last frame before
    /// it sleeps, in microseconds (the daemon's `idle_spin_us`).
    #[arg(long)]
    idle_spin_us: Option<u64>,
    /// Without --busy-poll: how long a worker lets frames gather between passes while
    /// traffic flows, in microseconds, stretched to one and a half times as long at low
    /// rates (the daemon's `coalesce_us`; 0: no pause).
    #[arg(long)]
    coalesce_us: Option<u64>,
    /// The workers' nice value, -20 to 19 (the daemon's `worker_nice`).
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i8).range(-20..=19))]
    worker_nice: Option<i8>,
    /// The most UMEM frames an xwire port grows to (the daemon's `frames_per_port`).
    #[arg(long)]
    frames_per_port: Option<usize>,
    /// The fewest UMEM frames an xwire port rests at (the daemon's `min_frames_per_port`).
    #[arg(long)]
    min_frames_per_port: Option<usize>,
    /// The UMEM frames a worker's resting ports share (the daemon's
    /// `resting_frames_per_worker`; 0: every port rests at `min_frames_per_port`).
    #[arg(long)]
    resting_frames_per_worker: Option<usize>,
}

impl WorkerArgs {
    fn settings(&self) -> WorkerSettings {
        let daemon = WorkerSettings::default();
        WorkerSettings {
            busy_poll: self.busy_poll,
            idle_spin: self
                .idle_spin_us
                .map_or(daemon.idle_spin, Duration::from_micros),
            coalesce: self
                .coalesce_us
                .map_or(daemon.coalesce, Duration::from_micros),
            nice: self.worker_nice.unwrap_or(daemon.nice),
            frames_per_port: self.frames_per_port.unwrap_or(daemon.frames_per_port),
            min_frames_per_port: self
                .min_frames_per_port
                .unwrap_or(daemon.min_frames_per_port),
            resting_frames_per_worker: self
                .resting_frames_per_worker
                .unwrap_or(daemon.resting_frames_per_worker),
            ports: daemon.ports,
        }
    }
}

#[derive(Subcommand)]
enum Scenario {
    /// gen-ns -> device -> sink-ns on one node: direct veth, Linux bridge, DPDK testpmd,
    /// OVS with AF_XDP ports and xwire, at full speed, paced for latency, and idle.
    LocalFwd {
        #[command(flatten)]
        run: RunArgs,
        /// Devices to measure (direct-veth, linux-bridge, testpmd-af_xdp-io,
        /// ovs-netdev-afxdp, xwire; also xwire-af_packet: xwire with AF_PACKET ports).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "direct-veth,linux-bridge,testpmd-af_xdp-io,ovs-netdev-afxdp,xwire"
        )]
        devices: Vec<String>,
        /// Skip the idle pass (idle CPU, first frame after a silence).
        #[arg(long)]
        no_idle: bool,
        /// Print where frames went after each paced measurement (stderr): every veth
        /// end's drops, the sink socket's kernel drops, the most frames the generator
        /// owed at once, and xwire's link and port counters; and each loss-free search's
        /// trials.
        #[arg(long)]
        verbose: bool,
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// pod A -> node A -> wire -> node B -> pod B: xwire over QUIC (each carrier) and
    /// kernel VXLAN between the same nodes over the same underlay, at full speed, paced
    /// for latency, and a TCP transfer (iperf3).
    RemoteWire {
        #[command(flatten)]
        run: RunArgs,
        /// Paths to measure (kernel-vxlan, kernel-vxlan-sender-cpu, xwire-datagram,
        /// xwire-stream).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "kernel-vxlan,kernel-vxlan-sender-cpu,xwire-datagram,xwire-stream"
        )]
        paths: Vec<String>,
        /// The underlay veth's MTU, the same for every path (below 1602, 1514-byte frames
        /// do not fit xwire's datagrams and take the stream).
        #[arg(long, default_value_t = 9000)]
        underlay_mtu: u16,
        #[command(flatten)]
        worker: WorkerArgs,
        /// Open xwire's ports as AF_PACKET sockets, the fall-back where AF_XDP cannot be
        /// had, instead of AF_XDP (`local-fwd` has a device for it: xwire-af_packet).
        #[arg(long)]
        af_packet: bool,
        /// Skip the TCP pass.
        #[arg(long)]
        no_tcp: bool,
        /// Skip the frame passes (peak and latency): TCP only.
        #[arg(long)]
        no_frames: bool,
        /// Print xwire's counters after each measurement, and each loss-free search's
        /// trials (stderr).
        #[arg(long)]
        verbose: bool,
        /// Where the work runs: the wire's work apart from the traffic's, or a core per
        /// node as two single-core machines would have.
        #[arg(long, value_enum, default_value = "shared-wire-cpu")]
        layout: Layout,
    },
    /// A lab of `pods` pods with four links each, half of them across two nodes, brought
    /// up and torn down through the CNI plugin; p50/p99 ADD and DEL times next to the
    /// bridge plugin's, and total bring-up and tear-down times.
    CniScale {
        /// Pods to add and delete.
        #[arg(long, default_value_t = 50)]
        pods: usize,
        /// Calls in flight at once, as a kubelet starting many pods makes them (xwire's
        /// and the bridge baseline's alike); 1: one after another.
        #[arg(long, default_value_t = 1)]
        callers: usize,
        /// Also print where the calls' time went, by step (the daemons' breakdown, the
        /// plugin's start and its socket round trip).
        #[arg(long)]
        steps: bool,
        /// Where xwired and xwire are (default: next to this program).
        #[arg(long)]
        bin_dir: Option<std::path::PathBuf>,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The accuracy of the switch's impairments (delay 1/10/100 ms, loss 1/10/50 %,
    /// rate 10/100/1000 Mbit/s) and the cost of an all-zero one, each against the same
    /// wire unimpaired in the same run (xwire-pktgen's generator and sink).
    Impair {
        /// Repetitions of each measurement; the median is reported.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Seconds of each latency, rate and cost run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Keep the worker spinning when idle (a benchmark node) rather than sleeping in
        /// epoll (a lab's node).
        #[arg(long)]
        busy_poll: bool,
        /// The wire's path: a same-node veth pair steered through the switch, or veths to
        /// the node whose node ends are the switch's ports (a remote wire's end).
        #[arg(long, value_enum, default_value = "steered")]
        path: xwire_perf::impair_accuracy::WirePath,
        /// Only these groups of measurements (repeat the option; all by default).
        #[arg(long, value_enum)]
        only: Vec<xwire_perf::impair_accuracy::Part>,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Labs of the sizes given through the real CLI: a ring with an address pair on every
    /// link and chords across it (3,000 pods: 3,300 links), `lab up` and `lab down` timed
    /// and the daemons' memory once up (needs release builds of xwirectl, xwired, xwire
    /// and the plugin, next to this program or in --bin-dir).
    LabSize {
        /// Pod counts, one lab each, in order.
        #[arg(long, value_delimiter = ',', default_value = "3000")]
        pods: Vec<usize>,
        /// Emulated nodes, one value per pod count (the last repeats).
        #[arg(long, value_delimiter = ',', default_value = "3")]
        nodes: Vec<usize>,
        /// Where xwirectl is (default: next to this program).
        #[arg(long)]
        bin_dir: Option<std::path::PathBuf>,
        /// Runs of each size, one line each, then their least, median and most (on
        /// standard error, with --json)
        #[arg(long, default_value_t = 1)]
        reps: usize,
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// A KNE-sized ring (one Topology per pod, every link across two nodes, or on one)
    /// through a real kube-apiserver and etcd (found in KUBEBUILDER_ASSETS or on PATH):
    /// time from the first ADD until every wire forwards, and API requests per pod (the
    /// daemons' count and the server's), next to the same ring on the embedded store
    /// (needs release builds of xwired, xwire-signer, xwire, xwirectl).
    KubeScale {
        /// Pods in the ring.
        #[arg(long, default_value_t = 150)]
        pods: usize,
        /// Nodes the ring's pods alternate between: 2 (every link crosses nodes) or 1
        /// (every link a veth wire).
        #[arg(long, default_value_t = 2)]
        nodes: usize,
        /// ADD calls in flight at once, as a kubelet starting many pods makes them (both
        /// stores alike); 1: one after another.
        #[arg(long, default_value_t = 1)]
        callers: usize,
        /// Where xwired, xwire-signer, xwire and xwirectl are (default: next to this
        /// program).
        #[arg(long)]
        bin_dir: Option<std::path::PathBuf>,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Restart reconciliation: time from a killed daemon's start to all its wires
    /// forwarding again, next to the cold bring-up of the same wires, and frames lost on
    /// wires that do not go through it (needs release builds of xwired and xwire).
    Restart {
        /// Wire counts to restart a node with, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
        wires: Vec<usize>,
        /// UMEM frames fast-path ports open with (the daemons' `min_frames_per_port`),
        /// each value a run for every --wires (the kernel pins and zeroes a port's
        /// frames as it opens, so restart time grows with frames times wires).
        #[arg(long, value_delimiter = ',', default_values_t = [WorkerConfig::default().min_frames_per_port])]
        frames_per_port: Vec<usize>,
        /// Data-plane workers per node, each value a run for every other setting (more
        /// than one: `data_cores` 0, 1, ..., so that the ports of a restart open on
        /// several cores at once).
        #[arg(long, value_delimiter = ',', default_values_t = [1])]
        workers: Vec<usize>,
        /// Where xwired and xwire are (default: next to this program).
        #[arg(long)]
        bin_dir: Option<std::path::PathBuf>,
        /// One JSON array instead of a table.
        #[arg(long)]
        json: bool,
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

/// An error is one line on standard error and exit status 1, whatever RUST_BACKTRACE
/// says.
fn main() -> std::process::ExitCode {
    // `cargo xtask docs`: man pages and completions (see the xwire-cli-docs crate).
    xwire_cli_docs::generate_if_asked(<Cli as clap::CommandFactory>::command);
    // Before any thread starts: a run stopped by `timeout` or Ctrl-C takes down its
    // daemons, servers and namespaces.
    xwire_perf::testbed::termination::clean_up_on_termination();
    let result = run();
    xwire_perf::testbed::termination::park_if_terminating();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xwire-perf: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    xwire_logs::init("warn");
    match Cli::parse().scenario {
        Scenario::Dut {
            ports,
            core,
            busy_poll,
            af_packet,
            max_frame,
            seconds,
        } => dut(&ports, core, busy_poll, af_packet, max_frame, seconds),
        scenario @ Scenario::RemoteWire { .. } => remote_wire(scenario),
        Scenario::CniScale {
            pods,
            callers,
            steps,
            bin_dir,
            json,
        } => {
            let binaries = xwire_perf::cni_scale::Binaries::in_dir(&bin_dir_or_own(bin_dir)?)?;
            let report = xwire_perf::cni_scale::run(&binaries, pods, callers)?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                xwire_perf::cni_scale::print(&report, steps);
            }
            Ok(())
        }
        Scenario::Impair {
            reps,
            seconds,
            busy_poll,
            path,
            only,
            json,
        } => {
            let figures = xwire_perf::impair_accuracy::run(reps, seconds, busy_poll, path, &only)?;
            if json {
                println!("{}", serde_json::to_string(&figures)?);
            } else {
                xwire_perf::impair_accuracy::print(&figures);
            }
            Ok(())
        }
        Scenario::KubeScale {
            pods,
            nodes,
            callers,
            bin_dir,
            json,
        } => {
            let dir = bin_dir_or_own(bin_dir)?;
            let binaries = xwire_perf::cni_scale::Binaries::in_dir(&dir)?;
            let report = xwire_perf::kube_scale::run(
                &binaries,
                &dir.join("xwirectl"),
                pods,
                nodes,
                callers,
            )?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                xwire_perf::kube_scale::print(&report);
            }
            Ok(())
        }
        scenario @ Scenario::LabSize { .. } => lab_size(scenario),
        scenario @ Scenario::Restart { .. } => restart(scenario),
        scenario => local_fwd(scenario),
    }
}

/// `lab-size`: each lab's line as soon as it is measured, and the spread of its runs.
fn lab_size(scenario: Scenario) -> Result<()> {
    let Scenario::LabSize {
        pods,
        nodes,
        bin_dir,
        reps,
        json,
    } = scenario
    else {
        unreachable!("called for lab-size only")
    };
    let xwirectl = bin_dir_or_own(bin_dir)?.join("xwirectl");
    let mut reports = Vec::new();
    if !json {
        println!("{}", xwire_perf::lab_size::header());
    }
    // Each lab's line as soon as it is measured: a later size that fails keeps
    // the earlier ones.
    for (i, &count) in pods.iter().enumerate() {
        let node_count = nodes.get(i).or(nodes.last()).copied().unwrap_or(3);
        let mut runs = Vec::new();
        for rep in 1..=reps.max(1) {
            eprintln!("lab-size: {count} pods on {node_count} nodes, run {rep} of {reps}");
            let report = xwire_perf::lab_size::run(&xwirectl, count, node_count)?;
            if !json {
                println!("{}", xwire_perf::lab_size::row(&report));
            }
            runs.push(report);
        }
        if runs.len() > 1 {
            if let Some(spread) = xwire_perf::lab_size::spread(&runs) {
                if json {
                    eprintln!("{spread}");
                } else {
                    println!("{spread}");
                }
            }
        }
        reports.extend(runs);
    }
    if json {
        println!("{}", serde_json::to_string(&reports)?);
    }
    Ok(())
}

/// `restart`: every combination of workers, frames per port and wires asked for.
fn restart(scenario: Scenario) -> Result<()> {
    let Scenario::Restart {
        wires,
        frames_per_port,
        workers,
        bin_dir,
        json,
    } = scenario
    else {
        unreachable!("called for restart only")
    };
    let binaries = xwire_perf::cni_scale::Binaries::in_dir(&bin_dir_or_own(bin_dir)?)?;
    let mut reports = Vec::new();
    for &count in &workers {
        for &frames in &frames_per_port {
            for &n in &wires {
                reports.push(xwire_perf::restart::run(&binaries, n, frames, count)?);
            }
        }
    }
    if json {
        println!("{}", serde_json::to_string(&reports)?);
    } else {
        xwire_perf::restart::print(&reports);
    }
    Ok(())
}

/// The directory given, or the one this program is in.
fn bin_dir_or_own(dir: Option<std::path::PathBuf>) -> Result<std::path::PathBuf> {
    match dir {
        Some(dir) => Ok(dir),
        None => Ok(std::env::current_exe()?
            .parent()
            .context("the program's directory")?
            .to_owned()),
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
    let counters = worker.add_link(xwire_fastpath::WireId(1), a.id, b.id)?;
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
        run,
        devices,
        no_idle,
        verbose,
        worker,
    } = scenario
    else {
        unreachable!("called for local-fwd only")
    };
    let settings = worker.settings();
    let devices = devices
        .iter()
        .map(|name| Device::parse(name, settings).with_context(|| format!("unknown device {name}")))
        .collect::<Result<Vec<_>>>()?;
    let tools: Vec<Tool> = devices
        .iter()
        .filter_map(|device| match device {
            Device::Testpmd => Some(tools::TESTPMD),
            Device::OvsAfxdp => Some(tools::OVS),
            _ => None,
        })
        .collect();
    tools::ensure(&tools, !run.no_install)?;
    if !run.json {
        println!("{}", settings.describe());
    }
    let seconds = run.seconds;
    let mut rows = Vec::new();
    let peak_sizes = if run.no_peak { &[][..] } else { &run.sizes[..] };
    for &size in peak_sizes {
        let fits = |d: &&Device| size <= d.max_frame();
        for &device in devices.iter().filter(fits) {
            rows.push(run.median(|| peak(device, size, seconds), |r| r.delivered_pps)?);
        }
        if !run.json {
            print_ratios(&rows, size);
        }
        if run.no_latency {
            continue;
        }
        // Latency at half of xwire's peak rate, for every device.
        let Some(xwire) = rows
            .iter()
            .find(|r| r.name == "xwire" && r.frame_bytes == size)
        else {
            continue;
        };
        let rate = ((xwire.delivered_pps / 2.0) as u64).max(1);
        for &device in devices.iter().filter(fits) {
            rows.push(run.median(
                || paced(device, size, seconds, (rate, Wait::Yield), verbose),
                |r| r.p99_us.unwrap_or(0.0),
            )?);
        }
    }
    for &size in &run.sizes {
        let fits = |d: &&Device| size <= d.max_frame();
        if !run.no_lossfree {
            let mut found = Vec::new();
            for &device in devices.iter().filter(fits) {
                let rows =
                    local_fwd::lossfree(device, size, run.search_length(), &run.flows, verbose)?;
                emit_lossfree(&rows, run.json, verbose);
                found.extend(rows);
            }
            if !run.json {
                print_lossfree_ratios(&found, |name| name == "xwire");
            }
        }
        if !run.no_cost {
            let mut costs = Vec::new();
            for &device in devices.iter().filter(fits) {
                costs.push(run.median(
                    || paced(device, size, seconds, (run.cost_rate, Wait::Sleep), verbose),
                    |r| r.cpu_ns_per_frame.unwrap_or(0.0),
                )?);
            }
            if !run.json {
                print_cost_ratios(&costs, "xwire", run.cost_rate);
            }
        }
    }
    if !no_idle {
        idle_rows(&devices, seconds, run.json)?;
    }
    Ok(())
}

/// `local-fwd`'s idle part: the machine's own wake-up floor, then each device's CPU
/// while idle and its first frame after 100 ms of silence.
fn idle_rows(devices: &[Device], seconds: f64, json: bool) -> Result<()> {
    let silence = Duration::from_millis(100);
    let probes = 50;
    let floor = wake_floor(silence, probes);
    for row in std::iter::once(floor).chain(
        devices
            .iter()
            .map(|&device| idle(device, seconds, silence, probes)),
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
    Ok(())
}

fn remote_wire(scenario: Scenario) -> Result<()> {
    let Scenario::RemoteWire {
        run,
        paths,
        underlay_mtu,
        worker,
        af_packet,
        no_tcp,
        no_frames,
        verbose,
        layout,
    } = scenario
    else {
        unreachable!("called for remote-wire only")
    };
    let paths = paths
        .iter()
        .map(|name| WirePath::parse(name).with_context(|| format!("unknown path {name}")))
        .collect::<Result<Vec<_>>>()?;
    if !no_tcp {
        tools::ensure(&[tools::IPERF3], !run.no_install)?;
    }
    let mut settings = worker.settings();
    if af_packet {
        settings.ports = PortChoice::AfPacket;
    }
    let setup = Setup {
        underlay_mtu,
        worker: settings,
        verbose,
        layout,
    };
    if !run.json {
        println!(
            "underlay MTU {underlay_mtu}; pod MTU 1500, TX checksum, TSO, GSO and GRO off on the pod veths; {}; {}",
            setup.worker.describe(),
            layout.describe()
        );
    }
    let seconds = run.seconds;
    let sizes = if no_frames { &[][..] } else { &run.sizes[..] };
    let peak_sizes = if run.no_peak { &[][..] } else { sizes };
    for &size in peak_sizes {
        let peaks = paths
            .iter()
            .map(|&path| {
                run.median(
                    || remote_wire::peak(path, size, seconds, setup),
                    |r| r.delivered_pps,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if !run.json {
            print_wire_ratios(&peaks, |r| r.delivered_pps, &format!("{size} B"));
        }
        if !run.no_latency {
            let reference = peaks
                .iter()
                .find(|r| r.name == WirePath::Xwire(xwire_fastpath::peer::Carrier::Datagram).name())
                .or(peaks.first());
            if let Some(reference) = reference {
                let rate = ((reference.delivered_pps / 2.0) as u64).max(1);
                for &path in &paths {
                    run.median(
                        || remote_wire::paced(path, size, seconds, rate, setup, Wait::Yield),
                        |r| r.p99_us.unwrap_or(0.0),
                    )?;
                }
            }
        }
    }
    for &size in sizes {
        if !run.no_lossfree {
            let mut found = Vec::new();
            for &path in &paths {
                let rows =
                    remote_wire::lossfree(path, size, run.search_length(), &run.flows, setup)?;
                emit_lossfree(&rows, run.json, setup.verbose);
                found.extend(rows);
            }
            if !run.json {
                print_lossfree_ratios(&found, |name| name.starts_with("xwire"));
            }
        }
        if !run.no_cost {
            let mut costs = Vec::new();
            for &path in &paths {
                costs.push(run.median(
                    || remote_wire::paced(path, size, seconds, run.cost_rate, setup, Wait::Sleep),
                    |r| r.cpu_ns_per_frame.unwrap_or(0.0),
                )?);
            }
            if !run.json {
                print_cost_ratios(&costs, "xwire", run.cost_rate);
            }
        }
    }
    if !no_tcp {
        tcp_rows(&run, &paths, setup)?;
    }
    Ok(())
}

/// `remote-wire`'s TCP part: iperf3 through each path.
fn tcp_rows(run: &RunArgs, paths: &[WirePath], setup: Setup) -> Result<()> {
    let tcp = paths
        .iter()
        .map(|&path| {
            run.median(
                || remote_wire::tcp(path, run.seconds, setup),
                |r| r.tcp_gbps.unwrap_or(0.0),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    if !run.json {
        print_wire_ratios(&tcp, |r| r.tcp_gbps.unwrap_or(0.0), "TCP");
    }
    Ok(())
}

/// Each row as a line (or JSON, which carries the search's trials); with `verbose`, the
/// search's trials on stderr beneath it.
fn emit_lossfree(rows: &[LossfreeRow], json: bool, verbose: bool) {
    for row in rows {
        if json {
            println!("{}", serde_json::to_string(row).expect("a row serialises"));
            continue;
        }
        let f = &row.figure;
        println!(
            "{:<28} {:>5} B  {} {:<5}  loss-free {:>9.0} pps {:>6.2} Gbps  p99 {:>7} us   full rate {:>9.0} pps, loss {:>6.2}% ({} at the sink)  ({} trials)",
            row.name,
            f.frame_bytes,
            f.direction,
            if f.at_once { "both" } else { "alone" },
            f.lossfree_pps,
            f.lossfree_gbps,
            f.p99_us.map_or("-".to_owned(), |us| format!("{us:.1}")),
            f.peak_delivered_pps,
            f.peak_loss_ratio * 100.0,
            f.peak_sink_dropped,
            f.trials
        );
        if verbose {
            for line in f.search_lines() {
                eprintln!("  {line}");
            }
        }
    }
}

/// The loss-free rate of each of ours over the best baseline's, per direction and flow.
fn print_lossfree_ratios(rows: &[LossfreeRow], ours: impl Fn(&str) -> bool) {
    let key = |r: &LossfreeRow| (r.figure.direction.clone(), r.figure.at_once);
    let mut seen = Vec::new();
    for row in rows.iter().filter(|r| ours(&r.name)) {
        let Some(best) = rows
            .iter()
            .filter(|b| !ours(&b.name) && key(b) == key(row) && b.name != "direct-veth")
            .max_by(|a, b| a.figure.lossfree_pps.total_cmp(&b.figure.lossfree_pps))
        else {
            continue;
        };
        seen.push(format!(
            "{} {} {}: {:.2}",
            row.name,
            row.figure.direction,
            if row.figure.at_once { "both" } else { "alone" },
            row.figure.lossfree_pps / best.figure.lossfree_pps.max(1.0)
        ));
        if seen.len() == 1 {
            print!(
                "  loss-free ratios over the best baseline ({}): ",
                best.name
            );
        }
    }
    if !seen.is_empty() {
        println!("{}", seen.join(", "));
    }
}

/// CPU time per frame of each row, and ours over each other row's.
fn print_cost_ratios(rows: &[Row], ours_prefix: &str, rate: u64) {
    let cost = |r: &Row| r.cpu_ns_per_frame.unwrap_or(f64::NAN);
    let figures: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {:.0}", r.name, cost(r)))
        .collect();
    println!(
        "  machine CPU ns per frame at {rate} pps: {}",
        figures.join(", ")
    );
    for ours in rows.iter().filter(|r| r.name.starts_with(ours_prefix)) {
        let ratios: Vec<String> = rows
            .iter()
            .filter(|r| !r.name.starts_with(ours_prefix))
            .map(|r| format!("{} {:.2}", r.name, cost(ours) / cost(r)))
            .collect();
        println!("  cost ratios, {} over: {}", ours.name, ratios.join(", "));
    }
}

/// Each xwire row over the better of the VXLAN rows, from this run.
fn print_wire_ratios(rows: &[Row], key: impl Fn(&Row) -> f64, what: &str) {
    let is_xwire = |r: &Row| r.name.starts_with("xwire");
    let Some(best_vxlan) = rows
        .iter()
        .filter(|r| !is_xwire(r))
        .max_by(|a, b| key(a).total_cmp(&key(b)))
    else {
        return;
    };
    let ratios: Vec<String> = rows
        .iter()
        .filter(|r| is_xwire(r))
        .map(|r| format!("{} {:.2}", r.name, key(r) / key(best_vxlan)))
        .collect();
    println!(
        "  ratios at {what} over {}: {}",
        best_vxlan.name,
        ratios.join(", ")
    );
}

/// xwire's delivered rate over each baseline's, from this run's rows.
fn print_ratios(rows: &[Row], size: usize) {
    let Some(xwire) = rows
        .iter()
        .find(|r| r.name == "xwire" && r.frame_bytes == size)
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
        let tcp = row
            .tcp_gbps
            .map_or(String::new(), |g| format!("  tcp {g:.2} Gbps"));
        let cost = row.cpu_ns_per_frame.map_or(String::new(), |ns| {
            format!("  machine cpu {ns:.0} ns/frame")
        });
        let lost = row
            .lost_frames
            .map_or(String::new(), |n| format!(" ({n} lost)"));
        println!(
            "{:<28} {:>5} B  offered {:>9.0} pps  delivered {:>9.0} pps  {:>6.2} Gbps  loss {:>6.2}%{lost}  p50 {:>6} us  p99 {:>6} us  dut cpu {:.2}{tcp}{cost}",
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
        if !row.stages.is_empty() {
            let stages: Vec<String> = (row.stages.iter())
                .map(|s| format!("{} {:.0}", s.name, s.ns_per_frame))
                .collect();
            println!(
                "{:<28} cpu ns per frame by stage: {}",
                "",
                stages.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_argument_has_help_and_the_version_names_the_binary() {
        xwire_testbed::cli::assert_explains_itself(&super::Cli::command(), "xwire-perf");
    }
}
