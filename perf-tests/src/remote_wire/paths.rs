//! The wires remote-wire compares, each brought up between the same two node namespaces:
//! xwire (a worker per node, frames over QUIC) and kernel VXLAN (a bridge per node
//! joining the pod's veth to a VXLAN device), the baseline.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xwire_fastpath::peer::{Carrier, PeerConfig, PeerEvent};
use xwire_fastpath::{Direction, LinkCounters, PortId, Worker};
use xwire_pki::ClusterCa;

use crate::testbed::Netns;
use crate::worker_settings::WorkerSettings;

/// The link UID of the benchmark's wire.
const UID: xwire_fastpath::WireId = xwire_fastpath::WireId(7);
const VNI: u32 = 42;
const VXLAN_IF: &str = "vx42";

/// How the two pods are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WirePath {
    /// A bridge in each node joins the pod's veth to a VXLAN device on the underlay; the
    /// receive work of both nodes' pod veths is steered to the node's wire CPU, so that
    /// the whole tunnel runs there in either direction, as xwire's workers do (with one
    /// steered, the other direction's tunnel would run beside the generator).
    Vxlan,
    /// The same, with the tunnel's work left on the generator's CPU (where a veth's
    /// receive runs by default).
    VxlanOnSenderCpu,
    /// xwire: a worker per node on the DUT CPU, frames over QUIC on this carrier.
    Xwire(Carrier),
}

impl WirePath {
    pub const ALL: [WirePath; 4] = [
        WirePath::Vxlan,
        WirePath::VxlanOnSenderCpu,
        WirePath::Xwire(Carrier::Datagram),
        WirePath::Xwire(Carrier::Stream),
    ];

    pub fn name(self) -> &'static str {
        match self {
            WirePath::Vxlan => "kernel-vxlan",
            WirePath::VxlanOnSenderCpu => "kernel-vxlan-sender-cpu",
            WirePath::Xwire(Carrier::Datagram) => "xwire-datagram",
            WirePath::Xwire(Carrier::Stream) => "xwire-stream",
            // The fast path refuses a VXLAN carrier (the kernel's rows are the two above),
            // and `ALL` holds no such path.
            WirePath::Xwire(Carrier::Vxlan) => unreachable!("xwire's VXLAN is the kernel's"),
        }
    }

    pub fn parse(name: &str) -> Option<WirePath> {
        WirePath::ALL.into_iter().find(|p| p.name() == name)
    }

    pub fn is_xwire(self) -> bool {
        matches!(self, WirePath::Xwire(_))
    }
}

/// One node of the bed, as a path needs it.
pub(crate) struct NodeSide<'a> {
    pub ns: &'a Netns,
    /// The node's end of its pod's veth.
    pub pod_if: &'a str,
    pub underlay_if: &'a str,
    pub underlay_ip: &'a str,
    pub name: &'a str,
}

/// A running wire: dropping it stops it (the kernel's devices go with the namespaces);
/// xwire's also reports its counters.
pub enum Running {
    Kernel,
    Xwire {
        workers: [Worker; 2],
        links: [Arc<LinkCounters>; 2],
        ports: [PortId; 2],
    },
}

/// The UDP line of the node's /proc/net/snmp: where the kernel dropped datagrams.
pub fn udp_counters(ns: &Netns) -> String {
    ns.udp_counters()
        .unwrap_or_default()
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Running {
    /// The CPU time of each node's worker thread so far; none for the kernel's path.
    pub(crate) fn worker_cpu_times(&self) -> Vec<Option<Duration>> {
        match self {
            Running::Kernel => Vec::new(),
            Running::Xwire { workers, .. } => workers.iter().map(Worker::cpu_time).collect(),
        }
    }

    /// xwire's counters on both nodes (peer transport, link, kernel drops), to say where
    /// frames went; empty for the kernel's path.
    pub fn counters(&self) -> String {
        let Running::Xwire {
            workers,
            links,
            ports,
        } = self
        else {
            return String::new();
        };
        let mut out = String::new();
        for i in 0..2 {
            let peer = workers[i].peer_status().map(|(c, _)| c);
            let kernel = workers[i].kernel_drops(ports[i]);
            let stats = workers[i].stats();
            let quic = stats.as_ref().map(|s| &s.peers);
            // The pod port's UMEM frames now (sized by its traffic; `None` mid-resize).
            let frames = stats
                .as_ref()
                .ok()
                .and_then(|s| s.links.first()?.umem_frames[0]);
            // How long the worker was left away from its ports, since the bed started
            // (the longest, and how often over 1, 4 and 16 ms): a fill ring runs empty
            // when an absence outlasts it.
            let away = stats.as_ref().ok().map(|s| s.away);
            out.push_str(&format!(
                "  node {i}: peer {peer:?}\n    quic {quic:?}\n    link out {:?}\n    link in {:?}\n    kernel drops {kernel:?}, port frames {frames:?}\n    worker away {away:?}\n",
                links[i].snapshot(Direction::AToB),
                links[i].snapshot(Direction::BToA),
            ));
        }
        out
    }
}

/// Joins the pods of `nodes` by `path`, node `i`'s work on `cpus[i]`.
pub fn start(
    path: WirePath,
    nodes: [NodeSide<'_>; 2],
    underlay_mtu: u16,
    cpus: [usize; 2],
    settings: WorkerSettings,
) -> Result<Running> {
    match path {
        WirePath::Vxlan | WirePath::VxlanOnSenderCpu => {
            for (i, node) in nodes.iter().enumerate() {
                let remote = nodes[1 - i].underlay_ip;
                let out = node.ns.exec(Command::new("ip").args([
                    "link",
                    "add",
                    VXLAN_IF,
                    "type",
                    "vxlan",
                    "id",
                    &VNI.to_string(),
                    "local",
                    node.underlay_ip,
                    "remote",
                    remote,
                    "dstport",
                    "4789",
                    "dev",
                    node.underlay_if,
                ]))?;
                if !out.status.success() {
                    bail!(
                        "add {VXLAN_IF} in {}: {}",
                        node.ns.name(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                node.ns.add_bridge("br0", &[node.pod_if, VXLAN_IF])?;
            }
            if path == WirePath::Vxlan {
                for (node, &cpu) in nodes.iter().zip(&cpus) {
                    node.ns.steer_receive_to_cpu(node.pod_if, cpu)?;
                }
            }
            Ok(Running::Kernel)
        }
        WirePath::Xwire(carrier) => {
            let ca = ClusterCa::generate("xwire-perf-ca")?;
            let mut workers = Vec::new();
            let mut listening = Vec::new();
            let mut ports = Vec::new();
            for (node, &cpu) in nodes.iter().zip(&cpus) {
                let config = settings.config(cpu);
                let worker = node.ns.run(|| Worker::spawn(config))??;
                ports.push(worker.add_port(node.pod_if, 1514)?);
                let mut peers = PeerConfig::new(
                    ca.issue(node.name)?,
                    format!("{}:0", node.underlay_ip).parse()?,
                );
                peers.underlay_mtu = underlay_mtu;
                listening.push(worker.attach_peers(peers)?);
                workers.push(worker);
            }
            // Of two nodes, the one whose name sorts first dials: the other learns of its
            // peer first, or it refuses the first handshake ("not a peer's address"),
            // and the dialler's redial waits out a timeout.
            let mut order = [0, 1];
            order.sort_by_key(|&i| std::cmp::Reverse(nodes[i].name));
            let mut links = [None, None];
            for i in order {
                let other = 1 - i;
                let peer = workers[i].add_peer(nodes[other].name, listening[other], carrier)?;
                links[i] = Some(workers[i].add_remote_link(UID, ports[i].id, peer, None)?);
            }
            let links = links.map(|link| link.expect("both nodes were joined"));
            for (worker, node) in workers.iter().zip(&nodes) {
                wait_for_peer(worker, node.name)?;
            }
            let two = || anyhow::anyhow!("two nodes");
            Ok(Running::Xwire {
                workers: workers.try_into().map_err(|_| two())?,
                links,
                ports: [ports[0].id, ports[1].id],
            })
        }
    }
}

fn wait_for_peer(worker: &Worker, node: &str) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        let (_, events) = worker.peer_status().context("peer status")?;
        if events.iter().any(|e| matches!(e, PeerEvent::Up { .. })) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{node}: its peer did not come up within 10 s")
}
