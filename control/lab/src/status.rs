//! `xwirectl lab status`: the lab's nodes, pods, and every wire with its state, carrier
//! and counters. A wire's state is what the daemons of its two ends record; its counters
//! are the kernel's counters of the pod interfaces at its two ends (what went into the
//! wire at one end and came out at the other).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use netlink_packet_route::link::LinkAttribute;
use serde::Serialize;
use xwire_proto::local::{LinkEndCounters, NodeCounters, PeerCounters, Request};

use super::containers;
use super::file::{Lab, LabLink};
use super::namespaces;
use super::node_api;
use super::paths::LabPaths;

#[derive(Debug, Serialize)]
pub struct LabStatus {
    pub name: String,
    pub nodes: Vec<NodeStatus>,
    pub pods: Vec<PodStatus>,
    pub wires: Vec<WireStatus>,
    /// The management network: the host's addresses on it and its bridge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mgmt: Option<MgmtStatus>,
}

#[derive(Debug, Serialize)]
pub struct MgmtStatus {
    pub bridge: String,
    pub interface: String,
    pub ipv4_subnet: String,
    pub ipv6_subnet: String,
    pub host: xwire_model::lab::mgmt::Addresses,
}

impl LabStatus {
    /// Every node's daemon answers, every wire is up and every container runs.
    pub fn all_up(&self) -> bool {
        self.nodes.iter().all(|n| n.daemon_up)
            && self.wires.iter().all(|w| w.state == "up")
            && self
                .pods
                .iter()
                .all(|p| p.container.as_deref().is_none_or(|c| c == "running"))
    }
}

#[derive(Debug, Serialize)]
pub struct NodeStatus {
    pub name: String,
    pub underlay_address: String,
    /// Whether the node's daemon answers on its API socket.
    pub daemon_up: bool,
    /// Where the node's daemon serves Prometheus metrics.
    pub metrics: String,
    /// The share of its time the node's fast-path worker spent moving frames, since it
    /// started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_busy: Option<f64>,
    /// The longest the node's workers were away from their ports between two passes, in
    /// milliseconds, and how many times they came back after more than 4 ms: where a
    /// port drops frames for want of a buffer (`rx_fill_ring_empty`), this says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_longest_away_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_away_over_4ms: Option<u64>,
    /// The nice value each of the node's workers runs at: -20 unless the daemon was
    /// refused it (see `worker_nice` in `control/README.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worker_nice: Vec<i8>,
    /// Frames the node's peer transport dropped, by reason (`blocked`: the carrier's
    /// queue or window toward a peer was full), over all its wires; reasons that never
    /// happened are left out. These are no port's or link's, so the wires' DROPS miss
    /// them: in one overloaded `lab bench` trial they were nearly all of what the wire
    /// lost.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub transport_drops: BTreeMap<String, u64>,
    /// The node's QUIC connections to its peers.
    pub peers: Vec<PeerCounters>,
    /// In a lab with pools: the node's pool, whether it is a gateway, the gateway its
    /// routes to the other pools go through, and (a gateway) its tunnels and counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<serde_json::Value>,
}

#[derive(Debug, Serialize)]
pub struct PodStatus {
    pub name: String,
    pub node: String,
    pub netns: String,
    /// The image a pod that runs a container runs, and its container's state as podman
    /// says it (`running`, `exited`, ..., or `missing`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// Its addresses on the management network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mgmt: Option<xwire_model::lab::mgmt::Addresses>,
}

#[derive(Debug, Serialize)]
pub struct WireStatus {
    pub uid: u64,
    pub endpoints: [String; 2],
    /// What each endpoint's pod calls the interface (the lab file's `interface_names`,
    /// an imported kind's own names), where it names it.
    #[serde(skip_serializing_if = "no_names")]
    pub interface_names: [Option<String>; 2],
    /// `local` (both pods on one node: a veth pair) or `remote` (through the fast path
    /// and QUIC).
    pub kind: &'static str,
    /// `veth`, `switch` (a same-node wire through the fast path: impaired or captured),
    /// or the QUIC carrier: `datagram` or `stream`.
    pub carrier: String,
    /// The endpoints' addresses, when the lab file gives them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ips: Option<[String; 2]>,
    /// `up` when both ends are joined; otherwise what is missing.
    pub state: String,
    /// Each end's record on its node ("veth", "remote", "vxlan", "pending"), or "none".
    pub end_states: [String; 2],
    pub counters: [EndCounters; 2],
    /// The switch's counters of each end, when the switch carries the wire (remote,
    /// impaired or captured): frames and bytes the pod sent and received through it,
    /// drops by reason, and the kernel's drops at the end's port.
    pub switch: [Option<LinkEndCounters>; 2],
    /// The impairment in force A to B and B to A (`lab impair`, or the lab file).
    pub impairments: [Option<String>; 2],
}

impl WireStatus {
    /// Every frame the wire dropped that anything counted: the pod interfaces' drops,
    /// and the switch's, by every reason, at both ends and in both directions, with the
    /// kernel's at the switch's ports (a full fill ring drops frames before the switch
    /// sees them, and a DROPS of 0 beside them would say the wire lost nothing).
    pub fn drops(&self) -> u64 {
        let pods: u64 = (self.counters.iter())
            .map(|c| c.rx_dropped + c.tx_dropped)
            .sum();
        let switch: u64 = (self.switch.iter().flatten())
            .map(|end| {
                let ways = [&end.egress.drops, &end.ingress.drops];
                ways.iter().flat_map(|d| d.values()).sum::<u64>()
                    + end.kernel_drops.values().sum::<u64>()
            })
            .sum();
        pods + switch
    }
}

/// The kernel's counters of one pod interface.
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct EndCounters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub rx_dropped: u64,
    pub tx_dropped: u64,
}

pub(crate) fn read_lab(name: &str) -> Result<Lab> {
    let paths = LabPaths::new(name)?;
    let bytes = std::fs::read(paths.lab_file()).with_context(|| format!("lab {name} is not up"))?;
    let lab: Lab = serde_json::from_slice(&bytes)?;
    if lab.name != name {
        anyhow::bail!(
            "{} names lab {:?}, not {name}",
            paths.lab_file().display(),
            lab.name
        );
    }
    Ok(lab)
}

pub fn status(lab: &Lab) -> LabStatus {
    let paths = LabPaths::of(lab);
    let counters = node_api::node_counters(lab, &paths);
    let nodes = lab
        .nodes
        .iter()
        .map(|node| {
            let answered = counters.iter().find(|c| &c.node == node);
            NodeStatus {
                name: node.clone(),
                underlay_address: super::underlay::node_address(lab, node),
                daemon_up: answered.is_some()
                    || node_api::ask(&paths.node_socket(node), &Request::State).is_ok(),
                metrics: metrics_url(&paths, node),
                worker_busy: answered
                    .filter(|c| c.worker_running_seconds > 0.0)
                    .map(|c| c.worker_busy_seconds / c.worker_running_seconds),
                worker_longest_away_ms: answered.map(|c| c.worker_longest_away_seconds * 1e3),
                worker_away_over_4ms: answered.map(|c| c.worker_away_over_4ms),
                worker_nice: answered.map(|c| c.worker_nice.clone()).unwrap_or_default(),
                transport_drops: answered.map(transport_drops).unwrap_or_default(),
                peers: answered.map(|c| c.peers.clone()).unwrap_or_default(),
                pool: pool_state(lab, &paths, node),
            }
        })
        .collect();
    let switch = node_api::switch_counters(&counters, lab);
    let pods = lab
        .pods
        .iter()
        .map(|(pod, node)| PodStatus {
            name: pod.clone(),
            node: node.clone(),
            netns: paths.pod_netns(pod),
            image: lab.containers.get(pod).map(|c| c.image.clone()),
            container: lab
                .containers
                .contains_key(pod)
                .then(|| containers::state(lab, pod)),
            mgmt: lab.mgmt.as_ref().and_then(|m| m.pod_addresses(pod)),
        })
        .collect();
    let states = node_api::wire_states(lab, &paths);
    let counters = all_end_counters(lab, &paths);
    let wires = lab
        .links
        .iter()
        .map(|link| wire_status(lab, &states, &switch, &counters, link))
        .collect();
    let mgmt = lab.mgmt.as_ref().and_then(|m| {
        Some(MgmtStatus {
            bridge: super::mgmt::host_bridge(&lab.name),
            interface: m.interface.clone(),
            ipv4_subnet: m.ipv4_subnet.clone()?,
            ipv6_subnet: m.ipv6_subnet.clone()?,
            host: m.host_addresses()?,
        })
    });
    LabStatus {
        name: lab.name.clone(),
        nodes,
        pods,
        wires,
        mgmt,
    }
}

/// What node `node`'s daemon says of its pool (`None` in a lab without pools, or when
/// the daemon does not answer).
fn pool_state(lab: &Lab, paths: &LabPaths, node: &str) -> Option<serde_json::Value> {
    if lab.pools.is_empty() {
        return None;
    }
    match node_api::ask(&paths.node_socket(node), &Request::State) {
        Ok(xwire_proto::local::Response::State(state)) => state.pool,
        _ => Some(serde_json::json!({ "pool": super::underlay::pool_of(lab, node) })),
    }
}

/// Where the node's daemon serves metrics, as its configuration says.
fn metrics_url(paths: &LabPaths, node: &str) -> String {
    let file = paths.node_config(node);
    std::fs::read_to_string(&file)
        .ok()
        .and_then(|text| xwire_model::config::DaemonConfig::parse(&text, &file).ok())
        .and_then(|config| config.metrics_address)
        .map(|address| format!("http://{address}/metrics"))
        .unwrap_or_default()
}

fn no_names(names: &[Option<String>; 2]) -> bool {
    names.iter().all(Option::is_none)
}

impl WireStatus {
    /// Endpoint `index` as `POD:IF`, with the pod's own name for it after, if it has one.
    pub fn endpoint(&self, index: usize) -> String {
        match &self.interface_names[index] {
            Some(name) => format!("{} ({name})", self.endpoints[index]),
            None => self.endpoints[index].clone(),
        }
    }
}

fn wire_status(
    lab: &Lab,
    states: &HashMap<(String, u64), String>,
    switch: &HashMap<(String, u64), LinkEndCounters>,
    counters: &HashMap<(&str, &str), EndCounters>,
    link: &LabLink,
) -> WireStatus {
    let [a, b] = &link.endpoints;
    let local = lab.pods.get(&a.pod) == lab.pods.get(&b.pod);
    let end_state = |pod: &str| {
        states
            .get(&(pod.to_owned(), link.uid))
            .cloned()
            .unwrap_or_else(|| "none".into())
    };
    let end_states = [end_state(&a.pod), end_state(&b.pod)];
    let joined = |s: &str| matches!(s, "veth" | "remote" | "vxlan" | "switched" | "steered");
    let state = if end_states.iter().all(|s| joined(s)) {
        "up".to_owned()
    } else {
        let missing: Vec<String> = link
            .endpoints
            .iter()
            .zip(&end_states)
            .filter(|(_, s)| !joined(s))
            .map(|(end, s)| format!("{end} {s}"))
            .collect();
        format!("down ({})", missing.join(", "))
    };
    let counters = [a, b].map(|end| {
        counters
            .get(&(end.pod.as_str(), end.ifname.as_str()))
            .cloned()
            .unwrap_or_default()
    });
    WireStatus {
        uid: link.uid,
        endpoints: [a.to_string(), b.to_string()],
        interface_names: [a, b].map(|end| {
            lab.interface_names
                .get(&end.pod)
                .and_then(|names| names.get(&end.ifname))
                .cloned()
        }),
        kind: if local { "local" } else { "remote" },
        carrier: if local && end_states.iter().any(|s| s == "switched" || s == "steered") {
            "switch".into()
        } else if local {
            "veth".into()
        } else {
            link.carrier.clone().unwrap_or_else(|| "datagram".into())
        },
        ips: link.ips.clone(),
        state,
        end_states,
        counters,
        switch: [a, b].map(|end| switch.get(&(end.pod.clone(), link.uid)).cloned()),
        impairments: link.impair.clone().map(|i| i.map(|i| i.to_string())),
    }
}

/// The kernel's counters of every link end's pod interface, by pod and interface name:
/// one link dump per pod's namespace, a few namespaces side by side. A request per end,
/// each from a namespace opened for it, took 15 s after a 10,000-pod lab came up.
fn all_end_counters<'a>(
    lab: &'a Lab,
    paths: &LabPaths,
) -> HashMap<(&'a str, &'a str), EndCounters> {
    let mut ends: HashMap<&str, Vec<&str>> = HashMap::new();
    for link in &lab.links {
        for end in &link.endpoints {
            ends.entry(end.pod.as_str())
                .or_default()
                .push(end.ifname.as_str());
        }
    }
    let pods: Vec<(&str, Vec<&str>)> = ends.into_iter().collect();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    let chunk = pods.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let readers: Vec<_> = pods
            .chunks(chunk)
            .map(|pods| {
                scope.spawn(move || {
                    let mut found = Vec::new();
                    for (pod, ifnames) in pods {
                        for (ifname, counters) in pod_counters(&paths.pod_netns(pod)) {
                            if let Some(&name) = ifnames.iter().find(|&&n| n == ifname) {
                                found.push(((*pod, name), counters));
                            }
                        }
                    }
                    found
                })
            })
            .collect();
        readers
            .into_iter()
            .flat_map(|reader| reader.join().unwrap_or_default())
            .collect()
    })
}

/// Every interface's counters in one namespace (none where it cannot be read: a pod
/// whose namespace is gone shows zeros, as its wire's state says why).
fn pod_counters(netns: &str) -> Vec<(String, EndCounters)> {
    let Ok(ns) = namespaces::open(netns) else {
        return Vec::new();
    };
    let messages = ns.netlink("read interface counters", |h| async move {
        use futures::TryStreamExt;
        h.link().get().execute().try_collect::<Vec<_>>().await
    });
    let Ok(messages) = messages else {
        return Vec::new();
    };
    messages
        .iter()
        .filter_map(|message| {
            let name = message.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(name) => Some(name.clone()),
                _ => None,
            })?;
            let counters = message.attributes.iter().find_map(|a| match a {
                LinkAttribute::Stats64(s) => Some(EndCounters {
                    tx_packets: s.tx_packets,
                    tx_bytes: s.tx_bytes,
                    rx_packets: s.rx_packets,
                    rx_bytes: s.rx_bytes,
                    rx_dropped: s.rx_dropped,
                    tx_dropped: s.tx_dropped,
                }),
                _ => None,
            })?;
            Some((name, counters))
        })
        .collect()
}

/// The status as a table, for people.
pub fn render(status: &LabStatus) -> String {
    use super::table::count;
    let mut out = format!(
        "lab {}: {}, {}, {}\n\n",
        status.name,
        count(status.nodes.len(), "node"),
        count(status.pods.len(), "pod"),
        count(status.wires.len(), "wire")
    );
    out.push_str(&render_nodes(status));
    out.push_str(&render_peers(status));
    if let Some(m) = &status.mgmt {
        out.push_str(&format!(
            "\nmanagement network: {} {} on {} (this host: {}, {}; pods' interface {})\n",
            m.ipv4_subnet, m.ipv6_subnet, m.bridge, m.host.ipv4, m.host.ipv6, m.interface
        ));
    }
    out.push_str(&render_pods(status));
    out.push_str(&render_wires(status));
    out.push_str(&render_switch(status));
    out.push_str(&render_impairments(status));
    out
}

/// The transport's drop counters among a node's totals that moved, named by reason.
fn transport_drops(counters: &NodeCounters) -> BTreeMap<String, u64> {
    (counters.transport.iter())
        .filter(|(_, &count)| count > 0)
        .filter_map(|(name, &count)| {
            let reason = match name.as_str() {
                "malformed" | "udp_send_failed" => name.as_str(),
                other => other.strip_prefix("dropped_")?,
            };
            Some((reason.to_owned(), count))
        })
        .collect()
}

/// The nodes' table: underlay address, daemon, worker load, peer transport drops,
/// metrics (and pool).
fn render_nodes(status: &LabStatus) -> String {
    use super::table;
    let pools = status.nodes.iter().any(|n| n.pool.is_some());
    let mut header = vec![
        "NODE",
        "UNDERLAY",
        "DAEMON",
        "BUSY",
        "AWAY",
        "NICE",
        "PEER DROPS",
        "METRICS",
    ];
    if pools {
        header.push("POOL");
    }
    let mut nodes = table::new(&header, &[3, 4, 5]);
    for n in &status.nodes {
        let daemon = if n.daemon_up { "up" } else { "DOWN" };
        let busy = n
            .worker_busy
            .map_or("-".to_owned(), |b| format!("{:.1}%", b * 100.0));
        // The longest absence, and how many were over 4 ms.
        let away = match (n.worker_longest_away_ms, n.worker_away_over_4ms) {
            (Some(ms), Some(over)) => format!("{ms:.1} ms ({over} > 4 ms)"),
            _ => "-".to_owned(),
        };
        let mut row = vec![
            n.name.clone(),
            n.underlay_address.clone(),
            daemon.to_owned(),
            busy,
            away,
            worker_nice(&n.worker_nice),
            drops_cell(&n.transport_drops),
            n.metrics.clone(),
        ];
        if pools {
            row.push(n.pool.as_ref().map(describe_pool).unwrap_or_default());
        }
        nodes.add_row(row);
    }
    table::render(&nodes)
}

/// `reason=count ...`, or 0 when nothing was dropped.
fn drops_cell(drops: &BTreeMap<String, u64>) -> String {
    drops_text(
        drops
            .iter()
            .map(|(reason, count)| format!("{reason}={count}")),
    )
}

/// A DROPS cell: its counts, each `reason=count`, or 0 when there are none.
fn drops_text(counts: impl IntoIterator<Item = String>) -> String {
    let counts: Vec<String> = counts.into_iter().collect();
    if counts.is_empty() {
        "0".to_owned()
    } else {
        counts.join(" ")
    }
}

/// The workers' nice value, once when they all run at the same one (as they do unless
/// some were refused it), else each in worker order.
fn worker_nice(nice: &[i8]) -> String {
    match nice {
        [] => "-".to_owned(),
        [first, rest @ ..] if rest.iter().all(|n| n == first) => first.to_string(),
        all => all.iter().map(i8::to_string).collect::<Vec<_>>().join(","),
    }
}

/// The pods' table, after a blank line.
fn render_pods(status: &LabStatus) -> String {
    use super::table;
    let mut pods = table::new(&["POD", "NODE", "NETNS", "MGMT", "CONTAINER"], &[]);
    for p in &status.pods {
        let container = match (&p.image, &p.container) {
            (Some(image), Some(state)) => format!("{image} ({state})"),
            _ => "-".into(),
        };
        let mgmt = p
            .mgmt
            .as_ref()
            .map_or("-".to_owned(), |a| format!("{} {}", a.ipv4, a.ipv6));
        pods.add_row(vec![
            p.name.clone(),
            p.node.clone(),
            p.netns.clone(),
            mgmt,
            container,
        ]);
    }
    format!("\n{}", table::render(&pods))
}

/// The wires' table, after a blank line, and what its counts mean.
fn render_wires(status: &LabStatus) -> String {
    use super::table;
    let mut wires = table::new(
        &[
            "UID",
            "ENDPOINTS",
            "KIND",
            "CARRIER",
            "A->B FRAMES",
            "B->A FRAMES",
            "DROPS",
            "STATE",
        ],
        &[0, 4, 5, 6],
    );
    for w in &status.wires {
        let [a, b] = &w.counters;
        wires.add_row(vec![
            w.uid.to_string(),
            format!("{} <-> {}", w.endpoint(0), w.endpoint(1)),
            w.kind.to_owned(),
            w.carrier.clone(),
            format!("{}/{}", a.tx_packets, b.rx_packets),
            format!("{}/{}", b.tx_packets, a.rx_packets),
            w.drops().to_string(),
            w.state.clone(),
        ]);
    }
    format!(
        "\n{}\n(frames: sent at one end / received at the other, from the pod interfaces' counters; drops: the pod interfaces' and the switch's, every reason, the kernel's at its ports included)\n",
        table::render(&wires)
    )
}

/// The impaired wires' table, after a blank line; nothing when no wire is impaired.
fn render_impairments(status: &LabStatus) -> String {
    use super::table;
    let impaired: Vec<&WireStatus> = status
        .wires
        .iter()
        .filter(|w| w.impairments.iter().any(Option::is_some))
        .collect();
    if impaired.is_empty() {
        return String::new();
    }
    let mut impairments = table::new(&["UID", "DIR", "IMPAIRMENT"], &[0]);
    for w in impaired {
        for (direction, impairment) in ["A->B", "B->A"].iter().zip(&w.impairments) {
            if let Some(impairment) = impairment {
                impairments.add_row(vec![
                    w.uid.to_string(),
                    direction.to_string(),
                    impairment.to_string(),
                ]);
            }
        }
    }
    format!("\n{}", table::render(&impairments))
}

/// The columns of a peer connection, for `lab status` and `xwirectl wires`.
pub const PEER_HEADER: [&str; 8] = [
    "PEER",
    "WORKER",
    "UP",
    "RTT",
    "DGRAMS OUT",
    "DGRAMS IN",
    "LOST",
    "WINDOW",
];

/// A peer connection's cells, under `PEER_HEADER`.
pub fn peer_cells(peer: &PeerCounters) -> Vec<String> {
    vec![
        peer.node.clone(),
        peer.worker.to_string(),
        if peer.up { "yes" } else { "no" }.to_owned(),
        peer.rtt_us.map_or("-".into(), |us| format!("{us} µs")),
        peer.udp_datagrams_sent.to_string(),
        peer.udp_datagrams_received.to_string(),
        peer.lost_packets.to_string(),
        // Open unless the far end has been losing what it is sent (`peer/congestion.rs`).
        peer.window_cap
            .map_or("open".into(), |bytes| format!("{} KiB", bytes >> 10)),
    ]
}

/// Each node's QUIC connections to its peers (one per worker), as `lab status --json`
/// lists them.
fn render_peers(status: &LabStatus) -> String {
    let mut header = vec!["NODE"];
    header.extend(PEER_HEADER);
    let mut peers = super::table::new(&header, &[2, 4, 5, 6, 7, 8]);
    let mut any = false;
    for node in &status.nodes {
        for peer in &node.peers {
            any = true;
            let mut row = vec![node.name.clone()];
            row.extend(peer_cells(peer));
            peers.add_row(row);
        }
    }
    if any {
        format!("\n{}", super::table::render(&peers))
    } else {
        String::new()
    }
}

/// The switch's counters of the wire ends it carries: what each pod sent and received
/// through it, and every drop by reason (the switch's own and the kernel's at the port).
fn render_switch(status: &LabStatus) -> String {
    let ends: Vec<(u64, &LinkEndCounters)> = status
        .wires
        .iter()
        .flat_map(|w| w.switch.iter().flatten().map(move |end| (w.uid, end)))
        .collect();
    if ends.is_empty() {
        return String::new();
    }
    let mut table = super::table::new(
        &["UID", "END (SWITCH)", "PATH", "SENT", "RECEIVED", "DROPS"],
        &[0, 3, 4],
    );
    for (uid, end) in ends {
        let mut drops: Vec<String> = [("out", &end.egress), ("in", &end.ingress)]
            .iter()
            .flat_map(|(way, d)| {
                d.drops
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(move |(reason, n)| format!("{way}:{reason}={n}"))
            })
            .collect();
        drops.extend(
            end.kernel_drops
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(reason, n)| format!("kernel:{reason}={n}")),
        );
        table.add_row(vec![
            uid.to_string(),
            format!("{}:{}", end.pod, end.interface),
            end.path.to_string(),
            end.egress.frames.to_string(),
            end.ingress.frames.to_string(),
            drops_text(drops),
        ]);
    }
    format!("\n{}", super::table::render(&table))
}

/// `east (gateway; tunnels to b1, c1)` or `east (via a1)`.
fn describe_pool(pool: &serde_json::Value) -> String {
    let name = pool["pool"].as_str().unwrap_or("?");
    if pool["gateway"] == true {
        let tunnels: Vec<&str> = pool["tunnels_up"]
            .as_array()
            .map(|t| t.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        return format!(
            "{name} (gateway; tunnels to {})",
            if tunnels.is_empty() {
                "none".into()
            } else {
                tunnels.join(", ")
            }
        );
    }
    match pool["active_gateway"].as_str() {
        Some(gateway) => format!("{name} (via {gateway})"),
        None => name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use xwire_proto::local::{DirectionCounters, LinkEndCounters};

    use super::*;

    fn counted(reason: &str, n: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([(reason.to_owned(), n), ("no_link".to_owned(), 0)])
    }

    #[test]
    fn a_wires_drops_are_every_counter_of_its_pods_and_its_switch_ends() {
        let end = |kernel: u64| LinkEndCounters {
            egress: DirectionCounters {
                drops: counted("carrier_full", 5),
                ..Default::default()
            },
            ingress: DirectionCounters {
                drops: counted("tx_full", 7),
                ..Default::default()
            },
            kernel_drops: counted("rx_fill_ring_empty", kernel),
            ..Default::default()
        };
        let wire = WireStatus {
            uid: 1,
            endpoints: ["r1:eth1".into(), "r2:eth1".into()],
            interface_names: [Some("ethernet-1/1".into()), None],
            kind: "remote",
            carrier: "datagram".into(),
            ips: None,
            state: "up".into(),
            end_states: ["remote".into(), "remote".into()],
            counters: [
                EndCounters {
                    tx_dropped: 1,
                    ..Default::default()
                },
                EndCounters {
                    rx_dropped: 2,
                    ..Default::default()
                },
            ],
            switch: [Some(end(56725)), Some(end(0))],
            impairments: [None, None],
        };
        assert_eq!(wire.drops(), 1 + 2 + (5 + 7 + 56725) + (5 + 7));
        assert_eq!(wire.endpoint(0), "r1:eth1 (ethernet-1/1)");
        assert_eq!(wire.endpoint(1), "r2:eth1");
    }

    #[test]
    fn workers_at_one_nice_value_show_it_once_and_a_refused_one_shows_each() {
        assert_eq!(worker_nice(&[]), "-");
        assert_eq!(worker_nice(&[-20, -20]), "-20");
        assert_eq!(worker_nice(&[-20, 0]), "-20,0");
    }

    #[test]
    fn a_nodes_peer_drops_are_its_transports_drop_counters_that_moved() {
        let totals = [
            ("frames_sent", 6_322_376),
            ("dropped_blocked", 2_222_914),
            ("dropped_no_peer", 0),
            ("dropped_unknown_link", 3),
            ("malformed", 1),
            ("udp_send_failed", 0),
            ("dials", 2),
        ];
        let counters = NodeCounters {
            transport: (totals.iter())
                .map(|(name, n)| (name.to_string(), *n))
                .collect(),
            ..Default::default()
        };
        let drops = transport_drops(&counters);
        assert_eq!(
            drops_cell(&drops),
            "blocked=2222914 malformed=1 unknown_link=3"
        );
        assert_eq!(drops_cell(&BTreeMap::new()), "0");
    }
}
