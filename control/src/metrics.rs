//! The node's Prometheus metrics. The fast path's counters live in the worker and are
//! read at each scrape (`Request::Counters`); they become counter families in a registry
//! made for that scrape. What only the control plane sees, how long CNI calls and
//! reconcile passes take, is recorded as it happens in histograms that outlive scrapes.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::{text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use xwire_proto::local::{DirectionCounters, NodeCounters};

use crate::step_times;

/// The histograms the node records into; cheap to share (`Arc`).
pub struct NodeMetrics {
    cni_calls: Family<CommandLabels, Histogram, fn() -> Histogram>,
    cni_call_steps: Family<StepLabels, Histogram, fn() -> Histogram>,
    reconcile_passes: Histogram,
    refused_claims: Family<PeerNameLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerNameLabels {
    peer: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CommandLabels {
    command: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    command: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndLabels {
    namespace: String,
    pod: String,
    interface: String,
    uid: String,
    path: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    #[prometheus(flatten)]
    end: EndLabels,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerLabels {
    peer: String,
    /// The worker whose connection it is.
    worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PeerDirectionLabels {
    peer: String,
    worker: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

/// From 100 µs to about 13 s: a CNI call or a pass over a few wires takes well under a
/// millisecond; one over thousands, or one waiting on an API server, seconds.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

impl Default for NodeMetrics {
    fn default() -> Self {
        NodeMetrics {
            cni_calls: Family::new_with_constructor(duration_histogram),
            cni_call_steps: Family::new_with_constructor(duration_histogram),
            reconcile_passes: duration_histogram(),
            refused_claims: Family::default(),
        }
    }
}

/// The transport's counters that are drops, and the `reason` each is exported under.
const TRANSPORT_DROPS: [(&str, &str); 6] = [
    ("dropped_no_peer", "no_peer"),
    ("dropped_blocked", "blocked"),
    ("dropped_unknown_link", "unknown_link"),
    ("dropped_unread", "unread"),
    ("malformed", "malformed"),
    ("udp_send_failed", "udp_send_failed"),
];

impl NodeMetrics {
    /// A CNI call (`add`, `del`, `check`, `status`, `gc`) took `seconds`, from the
    /// moment the daemon read it to its answer (time waiting for the node included).
    pub(crate) fn observe_cni_call(&self, command: &str, seconds: f64) {
        let labels = CommandLabels {
            command: command.to_owned(),
        };
        self.cni_calls.get_or_create(&labels).observe(seconds);
    }

    /// Where a CNI call's time on the node went: `waited` in the node's queue, then the
    /// `steps` (see `step_times`) of the `handled` it took the node to answer; what no
    /// step accounts for is the step `other`. Every step is observed for every call (zero
    /// when the call had none), so each step's sum over the call count is its mean share.
    pub(crate) fn observe_cni_steps(
        &self,
        command: &str,
        waited: Duration,
        steps: &[(&'static str, Duration)],
        handled: Duration,
    ) {
        let observe = |step: &str, took: Duration| {
            let labels = StepLabels {
                command: command.to_owned(),
                step: step.to_owned(),
            };
            self.cni_call_steps
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        };
        observe("queue", waited);
        for step in step_times::STEPS {
            let took = steps
                .iter()
                .filter(|(s, _)| s == &step)
                .map(|(_, d)| *d)
                .sum();
            observe(step, took);
        }
        let accounted: Duration = steps.iter().map(|(_, d)| *d).sum();
        observe("other", handled.saturating_sub(accounted));
    }

    pub(crate) fn observe_reconcile_pass(&self, seconds: f64) {
        self.reconcile_passes.observe(seconds);
    }

    /// A claim from configured peer `peer` to a wire's far end was refused.
    pub(crate) fn refused_claim(&self, peer: &str) {
        let labels = PeerNameLabels {
            peer: peer.to_owned(),
        };
        self.refused_claims.get_or_create(&labels).inc();
    }

    /// The text exposition of everything: `counters` (just read from the node) and the
    /// histograms.
    pub fn encode(&self, counters: &NodeCounters) -> String {
        let mut registry = Registry::with_prefix("xwire");
        register_links(&mut registry, counters);
        register_peers(&mut registry, counters);
        let busy = Counter::<f64, AtomicU64>::default();
        busy.inc_by(counters.worker_busy_seconds);
        registry.register_with_unit(
            "worker_busy",
            "Time the fast-path worker spent in passes that moved frames",
            Unit::Seconds,
            busy,
        );
        let ratio = Gauge::<f64, AtomicU64>::default();
        if counters.worker_running_seconds > 0.0 {
            ratio.set(counters.worker_busy_seconds / counters.worker_running_seconds);
        }
        registry.register(
            "worker_busy_ratio",
            "Share of its time since it started that the fast-path worker spent moving frames",
            ratio,
        );
        register_away(&mut registry, counters);
        registry.register_with_unit(
            "cni_call_duration",
            "Time from reading a CNI call to answering it, by command",
            Unit::Seconds,
            self.cni_calls.clone(),
        );
        registry.register_with_unit(
            "cni_call_step_duration",
            "Time a CNI call spent in each step on the node (queue, netlink, fast-path ports, store, peers, other)",
            Unit::Seconds,
            self.cni_call_steps.clone(),
        );
        registry.register_with_unit(
            "reconcile_pass_duration",
            "Time of one reconciliation pass",
            Unit::Seconds,
            self.reconcile_passes.clone(),
        );
        registry.register(
            "refused_claims",
            "Claims by a peer node to hold a wire's far end that this node refused, by peer",
            self.refused_claims.clone(),
        );
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = text::encode(&mut out, &registry);
        out
    }
}

fn register_links(registry: &mut Registry, counters: &NodeCounters) {
    let frames = Family::<EndLabels, Counter>::default();
    let bytes = Family::<EndLabels, Counter>::default();
    let drops = Family::<DropLabels, Counter>::default();
    let kernel_drops = Family::<DropLabels, Counter>::default();
    let umem_frames = Family::<EndLabels, Gauge>::default();
    for end in &counters.links {
        let labels = |direction: &str| EndLabels {
            namespace: end.namespace.clone(),
            pod: end.pod.clone(),
            interface: end.interface.clone(),
            uid: end.uid.to_string(),
            path: end.path.clone(),
            direction: direction.to_owned(),
        };
        let with_reason = |labels: &EndLabels, reason: &str| DropLabels {
            end: labels.clone(),
            reason: reason.to_owned(),
        };
        let directions: [(&str, &DirectionCounters); 2] =
            [("egress", &end.egress), ("ingress", &end.ingress)];
        for (name, direction) in directions {
            let labels = labels(name);
            frames.get_or_create(&labels).inc_by(direction.frames);
            bytes.get_or_create(&labels).inc_by(direction.bytes);
            for (reason, count) in &direction.drops {
                drops
                    .get_or_create(&with_reason(&labels, reason))
                    .inc_by(*count);
            }
        }
        // The kernel's drops at the port that takes the pod's frames: its egress.
        let egress = labels("egress");
        for (reason, count) in &end.kernel_drops {
            kernel_drops
                .get_or_create(&with_reason(&egress, reason))
                .inc_by(*count);
        }
        if let Some(frames) = end.umem_frames {
            umem_frames
                .get_or_create(&egress)
                .set(i64::try_from(frames).unwrap_or(i64::MAX));
        }
    }
    registry.register(
        "link_frames",
        "Frames a pod sent into a wire (egress) or the wire delivered to it (ingress)",
        frames,
    );
    registry.register_with_unit(
        "link",
        "Bytes a pod sent into a wire (egress) or the wire delivered to it (ingress)",
        Unit::Bytes,
        bytes,
    );
    registry.register(
        "link_drops",
        "Frames of a wire end the switch dropped, by direction and reason",
        drops,
    );
    registry.register(
        "port_kernel_drops",
        "Frames the kernel dropped at a wire end's port before the switch saw them",
        kernel_drops,
    );
    registry.register(
        "port_umem_frames",
        "UMEM frames a wire end's port has now (it grows and shrinks with its traffic)",
        umem_frames,
    );
}

fn register_peers(registry: &mut Registry, counters: &NodeCounters) {
    let up = Family::<PeerLabels, Gauge>::default();
    let rtt = Family::<PeerLabels, Gauge<f64, AtomicU64>>::default();
    let datagrams = Family::<PeerDirectionLabels, Counter>::default();
    let bytes = Family::<PeerDirectionLabels, Counter>::default();
    let lost = Family::<PeerLabels, Counter>::default();
    let congestion_events = Family::<PeerLabels, Counter>::default();
    let window_cap = Family::<PeerLabels, Gauge>::default();
    for peer in &counters.peers {
        let labels = PeerLabels {
            peer: peer.node.clone(),
            worker: peer.worker.to_string(),
        };
        up.get_or_create(&labels).set(i64::from(peer.up));
        if let Some(us) = peer.rtt_us {
            rtt.get_or_create(&labels).set(us as f64 / 1e6);
        }
        lost.get_or_create(&labels).inc_by(peer.lost_packets);
        congestion_events
            .get_or_create(&labels)
            .inc_by(peer.congestion_events);
        let cap = peer.window_cap.unwrap_or(0);
        window_cap
            .get_or_create(&labels)
            .set(i64::try_from(cap).unwrap_or(i64::MAX));
        for (direction, count, size) in [
            ("egress", peer.udp_datagrams_sent, peer.udp_bytes_sent),
            (
                "ingress",
                peer.udp_datagrams_received,
                peer.udp_bytes_received,
            ),
        ] {
            let labels = PeerDirectionLabels {
                peer: peer.node.clone(),
                worker: peer.worker.to_string(),
                direction: direction.to_owned(),
            };
            datagrams.get_or_create(&labels).inc_by(count);
            bytes.get_or_create(&labels).inc_by(size);
        }
    }
    let transport_drops = Family::<ReasonLabels, Counter>::default();
    for (name, reason) in TRANSPORT_DROPS {
        if let Some(count) = counters.transport.get(name) {
            let labels = ReasonLabels {
                reason: reason.to_owned(),
            };
            transport_drops.get_or_create(&labels).inc_by(*count);
        }
    }
    registry.register(
        "peer_up",
        "Whether the QUIC connection to a peer node is up",
        up,
    );
    registry.register_with_unit(
        "peer_rtt",
        "The QUIC connection's smoothed round-trip time to a peer node",
        Unit::Seconds,
        rtt,
    );
    registry.register(
        "peer_udp_datagrams",
        "UDP datagrams of the QUIC connection to a peer node, by direction",
        datagrams,
    );
    registry.register_with_unit(
        "peer_udp",
        "UDP payload bytes of the QUIC connection to a peer node, by direction",
        Unit::Bytes,
        bytes,
    );
    registry.register(
        "peer_lost_packets",
        "QUIC packets to a peer node that were declared lost",
        lost,
    );
    registry.register(
        "peer_congestion_events",
        "Times QUIC told the connection to a peer node of loss",
        congestion_events,
    );
    registry.register_with_unit(
        "peer_window_cap",
        "The connection's window while sustained loss holds it capped; 0 while it is open",
        Unit::Bytes,
        window_cap,
    );
    registry.register(
        "peer_transport_drops",
        "Frames and messages the peer transport dropped, by reason",
        transport_drops,
    );
}

/// How long the workers were away from their ports (see `NodeCounters`).
fn register_away(registry: &mut Registry, counters: &NodeCounters) {
    let longest = Gauge::<f64, AtomicU64>::default();
    longest.set(counters.worker_longest_away_seconds);
    registry.register_with_unit(
        "worker_longest_away",
        "The longest a fast-path worker was away from its ports between two passes, not \
         counting sleep with nothing to do (a port's fill ring must last that long)",
        Unit::Seconds,
        longest,
    );
    let away = Family::<AwayLabels, Counter>::default();
    for (over, count) in [
        ("1ms", counters.worker_away_over_1ms),
        ("4ms", counters.worker_away_over_4ms),
        ("16ms", counters.worker_away_over_16ms),
    ] {
        away.get_or_create(&AwayLabels { over: over.into() })
            .inc_by(count);
    }
    registry.register(
        "worker_away",
        "Times a fast-path worker came back to its ports after longer than `over`",
        away,
    );
    let nice = Family::<WorkerLabels, Gauge>::default();
    for (worker, value) in counters.worker_nice.iter().enumerate() {
        nice.get_or_create(&WorkerLabels {
            worker: worker.to_string(),
        })
        .set(i64::from(*value));
    }
    registry.register(
        "worker_nice",
        "The nice value a fast-path worker's thread runs at (the daemon's worker_nice unless the kernel refused it)",
        nice,
    );
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    worker: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AwayLabels {
    over: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::local::{LinkEndCounters, PeerCounters};

    #[test]
    fn counters_become_total_series_with_direction_labels() {
        let metrics = NodeMetrics::default();
        metrics.observe_cni_call("add", 0.002);
        metrics.observe_reconcile_pass(0.01);
        let mut end = LinkEndCounters {
            namespace: "lab".into(),
            pod: "r1".into(),
            interface: "eth1".into(),
            uid: 7,
            path: "remote".into(),
            ..LinkEndCounters::default()
        };
        end.egress.frames = 5;
        end.egress.bytes = 500;
        end.ingress.drops.insert("tx_full".into(), 2);
        end.kernel_drops.insert("rx_ring_full".into(), 3);
        end.umem_frames = Some(1024);
        let counters = NodeCounters {
            node: "n1".into(),
            links: vec![end],
            peers: vec![PeerCounters {
                node: "n2".into(),
                worker: 1,
                up: true,
                rtt_us: Some(250),
                udp_datagrams_sent: 9,
                congestion_events: 4,
                window_cap: Some(4 << 20),
                ..PeerCounters::default()
            }],
            worker_busy_seconds: 1.0,
            worker_running_seconds: 4.0,
            worker_longest_away_seconds: 0.021,
            worker_away_over_1ms: 30,
            worker_away_over_4ms: 6,
            worker_away_over_16ms: 1,
            worker_nice: vec![-20, 0],
            ..NodeCounters::default()
        };
        let text = metrics.encode(&counters);
        let labels = r#"namespace="lab",pod="r1",interface="eth1",uid="7",path="remote""#;
        for line in [
            format!(r#"xwire_link_frames_total{{{labels},direction="egress"}} 5"#),
            format!(r#"xwire_link_bytes_total{{{labels},direction="egress"}} 500"#),
            format!(r#"xwire_link_drops_total{{{labels},direction="ingress",reason="tx_full"}} 2"#),
            format!(
                r#"xwire_port_kernel_drops_total{{{labels},direction="egress",reason="rx_ring_full"}} 3"#
            ),
            format!(r#"xwire_port_umem_frames{{{labels},direction="egress"}} 1024"#),
            r#"xwire_peer_up{peer="n2",worker="1"} 1"#.into(),
            r#"xwire_peer_udp_datagrams_total{peer="n2",worker="1",direction="egress"} 9"#.into(),
            r#"xwire_peer_congestion_events_total{peer="n2",worker="1"} 4"#.into(),
            r#"xwire_peer_window_cap_bytes{peer="n2",worker="1"} 4194304"#.into(),
            "xwire_worker_busy_ratio 0.25".into(),
            "xwire_worker_longest_away_seconds 0.021".into(),
            r#"xwire_worker_away_total{over="4ms"} 6"#.into(),
            r#"xwire_worker_nice{worker="0"} -20"#.into(),
            r#"xwire_worker_nice{worker="1"} 0"#.into(),
            r#"xwire_cni_call_duration_seconds_count{command="add"} 1"#.into(),
            "xwire_reconcile_pass_duration_seconds_count 1".into(),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
