//! `xwire-perf remote-wire`: pod A -> node A -> wire -> node B -> pod B, the wire being
//! xwire over QUIC (DATAGRAM or stream carrier) or, as the baseline, kernel VXLAN, both
//! between the same two node namespaces over the same underlay veth and MTU.
//!
//! By default (`Layout::SharedWireCpu`) the generator runs in pod A on CPU 0 and the
//! wire's work (both xwire workers, or the whole VXLAN tunnel by RPS) on CPU 1.
//! `Layout::CorePerNode` is two single-core machines instead: node A, its worker and its
//! pod on CPU 0, node B's on CPU 1, each node's underlay receive steered to its own CPU
//! (the paced pass's sink stays in the generator's thread, for its timestamps).
//!
//! Both paths get the same pod veths: MTU 1500, TX checksum, TSO, GSO and GRO off on both
//! ends (a frame that leaves through AF_XDP must be complete, and the kernel tunnel gets
//! the same per-frame work).
//!
//! Three measurements:
//! - peak: full speed, delivered frames counted at pod B's interface;
//! - paced: a given rate, an AF_XDP sink on pod B's interface in the generator's thread,
//!   for latency;
//! - tcp: iperf3 from pod A (CPU 0) to pod B (CPU 1).

mod paths;

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xwire_bench::traffic::{self, PortOptions, Traffic, Wait};
use xwire_bench::trial::{End, Flow, Wire};

pub use paths::WirePath;

use crate::measure::{
    busy_while, cpu_stages, lossfree_rows, on_cpu, probe_traffic, usage_while, veth_drops,
    LossfreeRow, Row, SearchLength, Stage,
};
use crate::testbed::{unique_ifname, Mac, Netns, Veth};
use crate::worker_settings::WorkerSettings;

const GEN_CPU: usize = 0;
const DUT_CPU: usize = 1;
const POD_IF: &str = "eth1";
const POD_MTU: u32 = 1500;
const POD_IPS: [&str; 2] = ["192.0.2.1", "192.0.2.2"];
const POD_MACS: [Mac; 2] = [
    [0x02, 0x78, 0x77, 0x0a, 0x00, 0x01],
    [0x02, 0x78, 0x77, 0x0a, 0x00, 0x02],
];
const UNDERLAY_IF: &str = "ul0";
const UNDERLAY_IPS: [&str; 2] = ["198.51.100.1", "198.51.100.2"];
const NODE_NAMES: [&str; 2] = ["node-a", "node-b"];

/// Where a run's work goes on a two-core machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// The generator and sink (both pods) on CPU 0, the whole wire on CPU 1: the wire's
    /// work is measured apart from the traffic's.
    SharedWireCpu,
    /// A core per node, as two single-core machines joined by a cable: node A's pod,
    /// worker and underlay receive on CPU 0, node B's on CPU 1.
    CorePerNode,
}

impl Layout {
    /// The CPU of node `i`'s wire work (its xwire worker, its underlay receive).
    fn wire_cpu(self, node: usize) -> usize {
        match self {
            Layout::SharedWireCpu => DUT_CPU,
            Layout::CorePerNode => node,
        }
    }

    /// The CPU of pod `i`'s frames (generator and sink).
    fn pod_cpu(self, pod: usize) -> usize {
        match self {
            Layout::SharedWireCpu => GEN_CPU,
            Layout::CorePerNode => pod,
        }
    }

    /// The nice value of the pods' generator and sink threads: the workers' `nice` where
    /// they share a CPU with a worker (`trial::place_thread` says why), else their own.
    fn pod_nice(self, nice: i8) -> Option<i8> {
        match self {
            Layout::SharedWireCpu => None,
            Layout::CorePerNode => Some(nice),
        }
    }

    /// The CPU of pod `i`'s iperf3: the client on the generator's CPU, the server on the
    /// other (TCP's receiver has work of its own).
    fn iperf_cpu(self, pod: usize) -> usize {
        match self {
            Layout::SharedWireCpu => [GEN_CPU, DUT_CPU][pod],
            Layout::CorePerNode => pod,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Layout::SharedWireCpu => "traffic on CPU 0, the wire's work (both nodes) on CPU 1",
            Layout::CorePerNode => {
                "a core per node: node A, its worker and its pod on CPU 0, node B's on CPU 1"
            }
        }
    }
}

/// How a run is set up.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    /// The underlay veth's MTU, the same for every path. 9000 by default (a jumbo
    /// underlay, as data centres run): xwire needs 88 bytes around a frame in a QUIC
    /// datagram, so below 1602 a 1514-byte frame takes the stream instead.
    pub underlay_mtu: u16,
    /// How xwire's workers run (the daemon's defaults unless a flag says otherwise).
    pub worker: WorkerSettings,
    /// Print xwire's counters after each measurement (stderr).
    pub verbose: bool,
    pub layout: Layout,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            underlay_mtu: 9000,
            worker: WorkerSettings::default(),
            verbose: false,
            layout: Layout::SharedWireCpu,
        }
    }
}

/// The namespaces of one measurement.
struct Hosts {
    nodes: [Netns; 2],
    pods: [Netns; 2],
}

impl Hosts {
    fn new() -> Result<Hosts> {
        Ok(Hosts {
            nodes: [Netns::new("rw-na")?, Netns::new("rw-nb")?],
            pods: [Netns::new("rw-pa")?, Netns::new("rw-pb")?],
        })
    }
}

/// The pods, the nodes and the wire between them. Field order matters: the wire stops
/// before its interfaces go.
struct Bed<'a> {
    wire: paths::Running,
    veths: Vec<Veth<'a>>,
    hosts: &'a Hosts,
    layout: Layout,
}

impl<'a> Bed<'a> {
    fn new(hosts: &'a Hosts, path: WirePath, setup: Setup) -> Result<Bed<'a>> {
        let [node_a, node_b] = &hosts.nodes;
        let underlay = Veth::named(node_a, UNDERLAY_IF, node_b, UNDERLAY_IF)?;
        underlay.set_mtu(u32::from(setup.underlay_mtu))?;
        underlay.set_up()?;
        let mut veths = vec![underlay];
        for i in 0..2 {
            let (node, pod) = (&hosts.nodes[i], &hosts.pods[i]);
            node.add_address(UNDERLAY_IF, &format!("{}/24", UNDERLAY_IPS[i]))?;
            let wire = Veth::named(pod, POD_IF, node, &unique_ifname())?;
            wire.set_mtu(POD_MTU)?;
            pod.set_mac(POD_IF, POD_MACS[i])?;
            for (ns, ifname) in [(pod, wire.a_name()), (node, wire.b_name())] {
                ns.set_tx_checksum(ifname, false)?;
                ns.set_segmentation_offloads(ifname, false)?;
            }
            wire.set_up()?;
            pod.add_address(POD_IF, &format!("{}/24", POD_IPS[i]))?;
            veths.push(wire);
        }
        let sides = [0, 1].map(|i| paths::NodeSide {
            ns: &hosts.nodes[i],
            pod_if: veths[i + 1].b_name(),
            underlay_if: UNDERLAY_IF,
            underlay_ip: UNDERLAY_IPS[i],
            name: NODE_NAMES[i],
        });
        let cpus = [0, 1].map(|i| setup.layout.wire_cpu(i));
        if setup.layout == Layout::CorePerNode {
            for (node, &cpu) in hosts.nodes.iter().zip(&cpus) {
                node.steer_receive_to_cpu(UNDERLAY_IF, cpu)?;
            }
        }
        let wire = paths::start(path, sides, setup.underlay_mtu, cpus, setup.worker)?;
        let bed = Bed {
            wire,
            veths,
            hosts,
            layout: setup.layout,
        };
        // Both ways, so that VXLAN's bridges have learned both pods.
        if !crate::testbed::checks::ping(&hosts.pods[0], POD_IPS[1], 3)? {
            bail!("{}: pod A cannot ping pod B", path.name());
        }
        Ok(bed)
    }

    /// Says where xwire's frames went, when asked to.
    fn report(&self, setup: Setup, what: &str) {
        if !setup.verbose {
            return;
        }
        eprintln!(
            "{what}:\n{}  udp node a: {}\n  udp node b: {}\n  veths: {}",
            self.wire.counters(),
            paths::udp_counters(&self.hosts.nodes[0]),
            paths::udp_counters(&self.hosts.nodes[1]),
            veth_drops(&self.veths)
        );
    }

    fn pod(&self, i: usize) -> &Netns {
        &self.hosts.pods[i]
    }

    /// Runs `f` on a thread pinned to the generator's CPU, inside pod A.
    fn on_gen_cpu<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        Ok(on_cpu(self.pod(0), self.layout.pod_cpu(0), f)?)
    }

    /// The CPU whose busy share a row reports: the wire's, or node B's (the receiver's)
    /// with a core per node.
    fn reported_cpu(&self) -> usize {
        self.layout.wire_cpu(1)
    }
}

fn traffic(size: usize, seconds: f64, rate: u64) -> Traffic {
    probe_traffic(size, seconds, rate, POD_MACS[1])
}

/// Full speed for `seconds`; delivered frames counted at pod B's interface.
pub fn peak(path: WirePath, size: usize, seconds: f64, setup: Setup) -> Result<Row> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, path, setup)?;
    let before = bed.pod(1).link_stats(POD_IF)?;
    let (sent, cpu_cores) = busy_while(bed.reported_cpu(), || {
        bed.on_gen_cpu(|| traffic::send(POD_IF, &traffic(size, seconds, 0), PortOptions::default()))
    });
    let sent = sent??;
    // Frames still on the wire arrive within this.
    std::thread::sleep(Duration::from_millis(300));
    let after = bed.pod(1).link_stats(POD_IF)?;
    bed.report(setup, &format!("{} {size} B peak", path.name()));
    Ok(Row::peak(
        path.name().into(),
        size,
        sent,
        before,
        after,
        cpu_cores,
    ))
}

/// `rate` frames per second for `seconds`, received by a sink in the generator's thread,
/// which waits between frames as `wait` says (`Wait::Sleep` for the cost of a frame).
pub fn paced(
    path: WirePath,
    size: usize,
    seconds: f64,
    rate: u64,
    setup: Setup,
    wait: Wait,
) -> Result<Row> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, path, setup)?;
    let workers_before = bed.wire.worker_cpu_times();
    let (result, usage) = usage_while(bed.reported_cpu(), || {
        bed.on_gen_cpu(|| -> Result<_> {
            let mut sink = bed
                .pod(1)
                .run(|| traffic::open(POD_IF, size, PortOptions::default()))??;
            let mut gen = traffic::open(POD_IF, size, PortOptions::default())?;
            let run = traffic::send_and_sink(
                &mut gen,
                &mut sink,
                &traffic(size, seconds, rate),
                Duration::from_millis(300),
                wait,
            )?;
            Ok((run, sink.kernel_drops()))
        })
    });
    let ((sent, received), sink_drops) = result??;
    bed.report(setup, &format!("{} {size} B at {rate} pps", path.name()));
    if setup.verbose {
        eprintln!(
            "  sink: {sink_drops:?}\n  generator: at most {} frames due at once ({:.3} s in)",
            sent.largest_backlog,
            sent.largest_backlog_at.as_secs_f64()
        );
    }
    let report = received.stats.report(size, sent.frames, sent.seconds);
    let mut row = Row::paced(format!("{}@{rate}pps", path.name()), size, &report, usage);
    row.stages
        .extend(worker_stages(&bed, &workers_before, report.delivered));
    Ok(row)
}

/// The loss-free rate over the path, per flow, with trials of `length`: each
/// pod's end on the generator's CPU (the wire's work on the DUT CPU, as in the other
/// measurements), frames to the other pod's address.
pub fn lossfree(
    path: WirePath,
    size: usize,
    length: SearchLength,
    flows: &[Flow],
    setup: Setup,
) -> Result<Vec<LossfreeRow>> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, path, setup)?;
    let end = |i: usize| End {
        iface: POD_IF.to_owned(),
        netns: Some(bed.pod(i).path().display().to_string()),
        core: Some(setup.layout.pod_cpu(i)),
        nice: setup.layout.pod_nice(setup.worker.nice),
        mac: Some(POD_MACS[i]),
    };
    let mut wire = Wire::open(end(0), end(1), size, PortOptions::default())?;
    let rows = lossfree_rows(path.name(), &mut wire, size, length, flows)?;
    bed.report(setup, &format!("{} {size} B loss-free search", path.name()));
    Ok(rows)
}

/// Each xwire worker's CPU time since `before`, per frame of `frames`.
fn worker_stages(bed: &Bed<'_>, before: &[Option<Duration>], frames: u64) -> Vec<Stage> {
    let after = bed.wire.worker_cpu_times();
    let spent = before.iter().zip(&after).map(|pair| match pair {
        (Some(before), Some(after)) => Some(after.saturating_sub(*before)),
        _ => None,
    });
    (NODE_NAMES.iter().zip(spent))
        .filter_map(|(node, spent)| {
            Some(Stage {
                name: format!("{node} worker"),
                ns_per_frame: spent?.as_nanos() as f64 / frames.max(1) as f64,
            })
        })
        .collect()
}

/// A TCP transfer of `seconds` with iperf3 from pod A (client, CPU 0) to pod B (server,
/// CPU 1). The frame counts are the data direction's, at pod A's and pod B's interfaces.
pub fn tcp(path: WirePath, seconds: f64, setup: Setup) -> Result<Row> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, path, setup)?;
    let seconds = seconds.max(1.0).round() as u64;
    let _server = bed
        .pod(1)
        .spawn(
            Command::new("taskset")
                .args(["-c", &setup.layout.iperf_cpu(1).to_string()])
                // Serving until dropped, so that a client retry finds it.
                .args(["iperf3", "--server", "--bind", POD_IPS[1]])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
        .context("start iperf3 (a Debian package: apt-get install iperf3)")?;
    let sent_before = bed.pod(0).link_stats(POD_IF)?;
    let got_before = bed.pod(1).link_stats(POD_IF)?;
    let workers_before = bed.wire.worker_cpu_times();
    let (bits, usage) = usage_while(bed.reported_cpu(), || {
        // The server needs a moment to listen; the client retries until it has a result.
        let mut last = String::from("iperf3 client did not run");
        for _ in 0..20 {
            let out = bed.pod(0).exec(
                Command::new("taskset")
                    .args(["-c", &setup.layout.iperf_cpu(0).to_string()])
                    .args(["iperf3", "--client", POD_IPS[1], "--json"])
                    .args(["--time", &seconds.to_string()]),
            )?;
            match goodput(&out.stdout) {
                Ok(bits) => {
                    if setup.verbose {
                        eprintln!("  iperf3: {}", transfer_shape(&out.stdout));
                    }
                    return Ok(bits);
                }
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("iperf3: {last}")
    });
    let bits = bits?;
    bed.report(setup, &format!("{} TCP", path.name()));
    let sent = bed.pod(0).link_stats(POD_IF)?.tx_packets - sent_before.tx_packets;
    let got = bed.pod(1).link_stats(POD_IF)?;
    let delivered = got.rx_packets - got_before.rx_packets;
    // Per data frame; the acknowledgements' work is counted in it.
    let mut stages = cpu_stages(&usage, delivered);
    stages.extend(worker_stages(&bed, &workers_before, delivered));
    let seconds = seconds as f64;
    Ok(Row {
        name: format!("{} tcp", path.name()),
        frame_bytes: (POD_MTU + 14) as usize,
        offered_pps: sent as f64 / seconds,
        delivered_pps: delivered as f64 / seconds,
        gbps: (got.rx_bytes - got_before.rx_bytes) as f64 * 8.0 / seconds / 1e9,
        // Counted a moment apart, the two ends may differ by a frame in flight.
        loss_ratio: (1.0 - delivered as f64 / sent.max(1) as f64).max(0.0),
        lost_frames: None,
        p50_us: None,
        p99_us: None,
        cpu_cores: usage.dut_share,
        cpu_ns_per_frame: None,
        tcp_gbps: Some(bits / 1e9),
        stages,
    })
}

/// What `--verbose` shows of an iperf3 `--json` report: the sender's retransmits, and
/// the goodput of each interval (a transfer that lost frames early and never caught up
/// looks different from one slow throughout).
fn transfer_shape(report: &[u8]) -> String {
    let report: serde_json::Value = serde_json::from_slice(report).unwrap_or_default();
    let retransmits = &report["end"]["sum_sent"]["retransmits"];
    let intervals: Vec<String> = report["intervals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["sum"]["bits_per_second"].as_f64())
        .map(|bits| format!("{:.2}", bits / 1e9))
        .collect();
    format!(
        "retransmits {retransmits}, Gbps per second [{}]",
        intervals.join(" ")
    )
}

/// The received bits per second of an iperf3 `--json` report, or what went wrong.
fn goodput(report: &[u8]) -> Result<f64, String> {
    let report: serde_json::Value =
        serde_json::from_slice(report).map_err(|e| format!("unreadable --json output: {e}"))?;
    if let Some(error) = report["error"].as_str() {
        return Err(error.to_owned());
    }
    report["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .ok_or_else(|| "no end.sum_received.bits_per_second in its report".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_tunnel_runs_on_each_nodes_wire_cpu_in_both_directions() {
        for layout in [Layout::SharedWireCpu, Layout::CorePerNode] {
            let hosts = Hosts::new().unwrap();
            let setup = Setup {
                layout,
                ..Setup::default()
            };
            let bed = Bed::new(&hosts, WirePath::Vxlan, setup).unwrap();
            for node in 0..2 {
                // The node's end of pod `node`'s veth: where its frames enter the tunnel.
                let pod_end = bed.veths[node + 1].b_name();
                assert_eq!(
                    hosts.nodes[node].receive_cpus(pod_end).unwrap(),
                    1 << layout.wire_cpu(node),
                    "{layout:?}, node {node}"
                );
            }
        }
    }
}
