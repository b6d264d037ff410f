//! `Request::Counters`: the fast path's counters, named by the wire ends they belong to.
//! The worker knows links by wire id and ports; this node knows which pod's end each
//! port stands for. `report` joins the two and is pure, so it is tested without a worker.

use std::collections::{BTreeMap, HashMap};

use xwire_fastpath::counters::DirectionSnapshot;
use xwire_fastpath::stats::{LinkStats, PeerStats, WorkerStats};
use xwire_fastpath::{DropReason, KernelDrops, PortId};
use xwire_proto::local::{DirectionCounters, LinkEndCounters, NodeCounters, PeerCounters};

use super::error::{ErrorKind, NodeError};
use super::observe::Observer;
use crate::store::{EndKey, WireRecord};

/// The wire end a fast-path port stands for.
#[derive(Debug, Clone)]
pub(super) struct EndOfPort {
    pub(super) record: WireRecord,
    /// `remote`, `steered` or `switched`.
    pub(super) path: &'static str,
}

impl Observer<'_> {
    pub(super) fn counters(&self) -> Result<NodeCounters, NodeError> {
        let Some(fastpath) = &self.data.fastpath else {
            return Ok(NodeCounters {
                node: self.config.node_name.clone(),
                ..NodeCounters::default()
            });
        };
        let stats = fastpath.stats().map_err(|e| {
            NodeError::new(
                ErrorKind::Fastpath,
                "the fast path's counters",
                e.to_string(),
            )
        })?;
        let records: HashMap<EndKey, WireRecord> = self
            .records
            .store
            .wires()?
            .into_iter()
            .map(|record| (record.key(), record))
            .collect();
        let mut ends = HashMap::new();
        let open = self.data.ports.iter().map(|(key, port)| {
            let remote = records.get(key).is_some_and(|r| r.peer_node.is_some());
            (key, port, if remote { "remote" } else { "switched" })
        });
        let steered = self
            .data
            .steered
            .values()
            .flatten()
            .map(|(key, port)| (key, port, "steered"));
        for (key, port, path) in open.chain(steered) {
            if let Some(record) = records.get(key) {
                let record = record.clone();
                let worker = fastpath.index_of(port.wire_id);
                ends.insert((worker, port.id), EndOfPort { record, path });
            }
        }
        Ok(report(&self.config.node_name, &stats, &ends))
    }
}

/// The answer for the workers' `stats` (by worker index), with each link's ends named
/// by `ends`, keyed by worker and port (a port not in it, one whose wire is going away,
/// is left out). The transport's totals and the busy times are the workers' sums.
pub(super) fn report(
    node: &str,
    stats: &[WorkerStats],
    ends: &HashMap<(usize, PortId), EndOfPort>,
) -> NodeCounters {
    let mut links = Vec::new();
    for (worker, stats) in stats.iter().enumerate() {
        for link in &stats.links {
            if let Some(end) = ends.get(&(worker, link.a)) {
                links.push(end_counters(end, link, &link.a_to_b, &link.b_to_a, 0));
            }
            if let Some(end) = link.b.and_then(|b| ends.get(&(worker, b))) {
                links.push(end_counters(end, link, &link.b_to_a, &link.a_to_b, 1));
            }
        }
    }
    links.sort_by(|x, y| (&x.namespace, x.uid, &x.pod).cmp(&(&y.namespace, y.uid, &y.pod)));
    let mut transport: BTreeMap<String, u64> = BTreeMap::new();
    for worker in stats {
        for (name, value) in transport_totals(worker) {
            *transport.entry(name).or_default() += value;
        }
    }
    let peers = stats
        .iter()
        .enumerate()
        .flat_map(|(worker, s)| s.peers.iter().map(move |p| peer_counters(p, worker)))
        .collect();
    NodeCounters {
        node: node.to_owned(),
        links,
        peers,
        transport,
        worker_busy_seconds: stats.iter().map(|s| s.busy.as_secs_f64()).sum(),
        worker_running_seconds: stats.iter().map(|s| s.running.as_secs_f64()).sum(),
        workers: stats.len(),
        worker_longest_away_seconds: stats
            .iter()
            .map(|s| s.away.longest.as_secs_f64())
            .fold(0.0, f64::max),
        worker_away_over_1ms: stats.iter().map(|s| s.away.over[0]).sum(),
        worker_away_over_4ms: stats.iter().map(|s| s.away.over[1]).sum(),
        worker_away_over_16ms: stats.iter().map(|s| s.away.over[2]).sum(),
        worker_nice: stats.iter().map(|s| s.nice).collect(),
    }
}

fn transport_totals(stats: &WorkerStats) -> BTreeMap<String, u64> {
    stats
        .transport
        .map(|t| {
            [
                ("frames_sent", t.frames_sent),
                ("frames_received", t.frames_received),
                ("datagrams_sent", t.datagrams_sent),
                ("datagrams_received", t.datagrams_received),
                ("stream_frames_sent", t.stream_frames_sent),
                ("dropped_no_peer", t.dropped_no_peer),
                ("dropped_blocked", t.dropped_blocked),
                ("dropped_unknown_link", t.dropped_unknown_link),
                ("dropped_unread", t.dropped_unread),
                ("malformed", t.malformed),
                ("udp_send_failed", t.udp_send_failed),
                ("dials", t.dials),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect()
        })
        .unwrap_or_default()
}

fn end_counters(
    end: &EndOfPort,
    link: &LinkStats,
    sent: &DirectionSnapshot,
    received: &DirectionSnapshot,
    side: usize,
) -> LinkEndCounters {
    let record = &end.record;
    LinkEndCounters {
        namespace: record.topo_namespace.clone(),
        pod: record.local_pod_name.clone(),
        interface: record.local_pod_ifname.clone(),
        uid: record.link_uid,
        peer_pod: record.peer_pod.clone(),
        peer_node: record.peer_node.clone(),
        path: end.path.to_owned(),
        egress: direction(sent),
        ingress: direction(received),
        kernel_drops: link.kernel_drops[side]
            .map(kernel_drops)
            .unwrap_or_default(),
        umem_frames: link.umem_frames[side].map(|frames| frames as u64),
    }
}

fn direction(snapshot: &DirectionSnapshot) -> DirectionCounters {
    DirectionCounters {
        frames: snapshot.frames,
        bytes: snapshot.bytes,
        drops: DropReason::ALL
            .iter()
            .map(|reason| (reason.name().to_owned(), snapshot.dropped(*reason)))
            .collect(),
    }
}

fn kernel_drops(drops: KernelDrops) -> BTreeMap<String, u64> {
    [
        ("rx_ring_full", drops.rx_ring_full),
        ("rx_fill_ring_empty", drops.rx_fill_ring_empty),
        ("rx_other", drops.rx_other),
        ("tx_invalid", drops.tx_invalid),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

fn peer_counters(peer: &PeerStats, worker: usize) -> PeerCounters {
    PeerCounters {
        node: peer.name.clone(),
        worker,
        up: peer.up,
        rtt_us: peer.rtt.map(|rtt| rtt.as_micros() as u64),
        udp_datagrams_sent: peer.udp_datagrams_sent,
        udp_bytes_sent: peer.udp_bytes_sent,
        udp_datagrams_received: peer.udp_datagrams_received,
        udp_bytes_received: peer.udp_bytes_received,
        lost_packets: peer.lost_packets,
        datagram_frames_sent: peer.datagram_frames_sent,
        datagram_frames_received: peer.datagram_frames_received,
        congestion_events: peer.congestion_events,
        window_cap: peer.window_cap(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WireState;
    use xwire_fastpath::{Direction, LinkCounters, WireId};

    fn record(pod: &str, peer: &str, uid: u64, peer_node: Option<&str>) -> WireRecord {
        WireRecord {
            node_name: "n1".into(),
            link_uid: uid,
            topo_namespace: "lab".into(),
            local_pod_netns: String::new(),
            local_pod_netns_id: None,
            local_pod_name: pod.into(),
            local_pod_ip: None,
            local_pod_ifname: format!("eth{uid}"),
            wire_ifname: String::new(),
            peer_intf_id: WireId(uid),
            peer_node_ip: None,
            peer_pod: peer.into(),
            peer_node: peer_node.map(str::to_owned),
            state: WireState::Veth,
            container_id: String::new(),
        }
    }

    /// A steered same-node wire is one link with both ends on this node: each pod's
    /// egress is the direction its own port received, and the other pod's ingress. Two
    /// workers number their ports alike: each end is found by worker and port, and the
    /// node's totals are the workers' sums.
    #[test]
    fn each_end_sees_its_own_egress_and_the_other_ends_as_ingress() {
        let counters = LinkCounters::default();
        counters.forwarded(Direction::AToB, 3, 300);
        counters.forwarded(Direction::BToA, 1, 60);
        counters.dropped(Direction::AToB, DropReason::ImpairLoss, 2);
        let remote = LinkCounters::default();
        remote.forwarded(Direction::BToA, 7, 700);
        let stats = WorkerStats {
            links: vec![
                LinkStats {
                    wire: WireId(1),
                    a: PortId(0),
                    b: Some(PortId(1)),
                    a_to_b: counters.snapshot(Direction::AToB),
                    b_to_a: counters.snapshot(Direction::BToA),
                    kernel_drops: [
                        Some(KernelDrops {
                            rx_ring_full: 4,
                            ..KernelDrops::default()
                        }),
                        None,
                    ],
                    umem_frames: [Some(512), None],
                },
                // A link whose ports this node no longer names: left out.
                LinkStats {
                    wire: WireId(3),
                    a: PortId(9),
                    b: None,
                    a_to_b: remote.snapshot(Direction::AToB),
                    b_to_a: remote.snapshot(Direction::BToA),
                    kernel_drops: [None, None],
                    umem_frames: [None, None],
                },
            ],
            transport: Some(xwire_fastpath::peer::TransportCounters {
                frames_sent: 5,
                ..Default::default()
            }),
            busy: std::time::Duration::from_secs(1),
            running: std::time::Duration::from_secs(4),
            away: xwire_fastpath::stats::AwayTimes {
                longest: std::time::Duration::from_millis(21),
                over: [9, 3, 1],
            },
            ..WorkerStats::default()
        };
        let second = WorkerStats {
            links: vec![LinkStats {
                wire: WireId(2),
                a: PortId(0),
                b: None,
                a_to_b: remote.snapshot(Direction::AToB),
                b_to_a: remote.snapshot(Direction::BToA),
                kernel_drops: [None, None],
                umem_frames: [Some(128), None],
            }],
            transport: Some(xwire_fastpath::peer::TransportCounters {
                frames_sent: 2,
                ..Default::default()
            }),
            peers: vec![PeerStats {
                name: "n2".into(),
                up: true,
                ..PeerStats::default()
            }],
            busy: std::time::Duration::from_secs(2),
            running: std::time::Duration::from_secs(4),
            away: xwire_fastpath::stats::AwayTimes {
                longest: std::time::Duration::from_millis(5),
                over: [4, 1, 0],
            },
            nice: -20,
        };
        let end = |record, path| EndOfPort { record, path };
        let ends = HashMap::from([
            ((0, PortId(0)), end(record("r1", "r2", 1, None), "steered")),
            ((0, PortId(1)), end(record("r2", "r1", 1, None), "steered")),
            (
                (1, PortId(0)),
                end(record("r1", "r3", 2, Some("n2")), "remote"),
            ),
        ]);
        let answer = report("n1", &[stats, second], &ends);
        let found: Vec<_> = answer
            .links
            .iter()
            .map(|l| (l.pod.as_str(), l.uid, l.egress.frames, l.ingress.frames))
            .collect();
        assert_eq!(found, [("r1", 1, 3, 1), ("r2", 1, 1, 3), ("r1", 2, 0, 7)]);
        let r1 = &answer.links[0];
        assert_eq!(r1.egress.drops["impair_loss"], 2);
        assert_eq!(r1.egress.drops.len(), DropReason::ALL.len());
        assert_eq!(r1.kernel_drops["rx_ring_full"], 4);
        assert!(answer.links[1].kernel_drops.is_empty());
        assert_eq!(answer.links[2].peer_node.as_deref(), Some("n2"));
        assert_eq!(answer.transport["frames_sent"], 7);
        assert_eq!((answer.workers, answer.worker_busy_seconds), (2, 3.0));
        assert_eq!(answer.worker_running_seconds, 8.0);
        // The longest of any worker; the counts of all.
        assert_eq!(answer.worker_longest_away_seconds, 0.021);
        assert_eq!(
            (
                answer.worker_away_over_1ms,
                answer.worker_away_over_4ms,
                answer.worker_away_over_16ms
            ),
            (13, 4, 1)
        );
        // By worker: the first never set its own (a refused setting keeps 0).
        assert_eq!(answer.worker_nice, [0, -20]);
        assert_eq!(
            answer
                .peers
                .iter()
                .map(|p| (p.node.as_str(), p.worker, p.up))
                .collect::<Vec<_>>(),
            [("n2", 1, true)]
        );
    }
}
