//! The peer transport over a real underlay: two node namespaces joined by a veth, a QUIC
//! connection between them with certificates from a test CA, and frames of every size
//! crossing on each carrier.

mod support;

use std::cell::Cell;
use std::time::{Duration, Instant};

use support::TestNode;
use xwire_fastpath::peer::{
    Carrier, Flush, NodeIdentity, PeerConfig, PeerEvent, PeerId, PeerTransport,
};
use xwire_pki::ClusterCa;
use xwire_testbed::{Netns, Veth};

/// A frame whose bytes tell its length, sender and sequence number.
fn test_frame(len: usize, sender: u8, seq: u16) -> Vec<u8> {
    let mut f: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ sender)
        .collect();
    f[..2].copy_from_slice(&seq.to_be_bytes());
    f[2] = sender;
    f
}

struct Underlay {
    a: Netns,
    b: Netns,
}

impl Underlay {
    fn new(label: &str) -> Underlay {
        let a = Netns::new(&format!("{label}-a")).unwrap();
        let b = Netns::new(&format!("{label}-b")).unwrap();
        let wire = Veth::named(&a, "ul0", &b, "ul0").unwrap();
        a.add_address("ul0", "198.51.100.1/24").unwrap();
        b.add_address("ul0", "198.51.100.2/24").unwrap();
        wire.set_up().unwrap();
        // The namespaces own the veth now; the guard need not outlive this.
        std::mem::forget(wire);
        Underlay { a, b }
    }
}

fn bind(ns: &Netns, identity: NodeIdentity, addr: &str) -> PeerTransport {
    bind_with(ns, PeerConfig::new(identity, addr.parse().unwrap()))
}

fn bind_with(ns: &Netns, config: PeerConfig) -> PeerTransport {
    ns.run(|| PeerTransport::bind(config)).unwrap().unwrap()
}

/// What a transport delivered: (peer, link UID, frame).
type Delivered = Vec<(PeerId, u64, Vec<u8>)>;

/// Polls every transport until `done` holds or `limit` passes; frames for the link UIDs
/// in `known` are delivered, others refused.
fn run_until(
    nodes: &mut [(&mut PeerTransport, &mut Delivered)],
    known: &[u64],
    limit: Duration,
    mut done: impl FnMut(&mut [(&mut PeerTransport, &mut Delivered)]) -> bool,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        for (transport, delivered) in nodes.iter_mut() {
            transport.poll_frames(Flush::Now, &mut |peer, uid, frame| {
                let ok = known.contains(&uid);
                if ok {
                    delivered.push((peer, uid, frame.to_vec()));
                }
                ok
            });
        }
        if done(nodes) {
            return true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    false
}

/// node-a and node-b on the underlay, each declaring the other. node-a sorts first, so
/// it dials; node-b only ever answers (and knocks when it starts).
struct Pair {
    a: PeerTransport,
    /// `None` while node-b is down.
    b: Option<PeerTransport>,
    b_addr: std::net::SocketAddr,
    to_b: PeerId,
    to_a: PeerId,
    got_a: Delivered,
    got_b: Delivered,
    id_b: NodeIdentity,
}

impl Pair {
    /// The two, connected.
    fn connected(net: &Underlay) -> Pair {
        let ca = ClusterCa::generate("xwire-test-ca").unwrap();
        let (id_a, id_b) = (ca.issue("node-a").unwrap(), ca.issue("node-b").unwrap());
        let mut a = bind(&net.a, id_a, "198.51.100.1:0");
        let mut b = bind(&net.b, id_b.clone(), "198.51.100.2:0");
        let b_addr = b.local_addr();
        let to_b = a.add_peer("node-b", b_addr, Carrier::Datagram).unwrap();
        let to_a = b
            .add_peer("node-a", a.local_addr(), Carrier::Datagram)
            .unwrap();
        let mut pair = Pair {
            a,
            b: Some(b),
            b_addr,
            to_b,
            to_a,
            got_a: Delivered::new(),
            got_b: Delivered::new(),
            id_b,
        };
        assert!(
            pair.run(Duration::from_secs(15), Pair::both_up),
            "the peers came up"
        );
        pair
    }

    /// node-b crashes: no close frame.
    fn crash_b(&mut self) {
        self.b = None;
    }

    /// node-b starts again on its address, knowing node-a.
    fn start_b(&mut self, net: &Underlay) {
        let mut b = bind(&net.b, self.id_b.clone(), &self.b_addr.to_string());
        self.to_a = b
            .add_peer("node-a", self.a.local_addr(), Carrier::Datagram)
            .unwrap();
        self.b = Some(b);
    }

    fn both_up(&mut self) -> bool {
        self.a.is_up(self.to_b) && self.b.as_ref().is_some_and(|b| b.is_up(self.to_a))
    }

    /// Polls the transports up (link UID 7 is known) until `done` or `limit`.
    fn run(&mut self, limit: Duration, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            let nodes = [
                (Some(&mut self.a), &mut self.got_a),
                (self.b.as_mut(), &mut self.got_b),
            ];
            for (transport, delivered) in nodes {
                let Some(transport) = transport else { continue };
                transport.poll_frames(Flush::Now, &mut |peer, uid, frame| {
                    if uid == 7 {
                        delivered.push((peer, uid, frame.to_vec()));
                    }
                    uid == 7
                });
            }
            if done(self) {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }
}

fn frames_cross(carrier: Carrier, label: &str) {
    let net = Underlay::new(label);
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let mut a = bind(&net.a, ca.issue("node-a").unwrap(), "198.51.100.1:0");
    let mut b = bind(&net.b, ca.issue("node-b").unwrap(), "198.51.100.2:0");
    let to_b = a.add_peer("node-b", b.local_addr(), carrier).unwrap();
    let to_a = b.add_peer("node-a", a.local_addr(), carrier).unwrap();
    let (mut got_a, mut got_b) = (Delivered::new(), Delivered::new());
    assert!(
        run_until(
            &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
            &[],
            Duration::from_secs(10),
            |n| n[0].0.is_up(to_b) && n[1].0.is_up(to_a),
        ),
        "the peers came up"
    );

    let mut sizes: Vec<usize> = (60..=1514).step_by(97).collect();
    sizes.extend([1515, 2000, 4000, 8000, 9000, 9014, 60]);
    for (seq, &len) in sizes.iter().enumerate() {
        assert!(a.send_frame(to_b, 7, &test_frame(len, 0xa, seq as u16)));
        assert!(b.send_frame(to_a, 8, &test_frame(len, 0xb, seq as u16)));
    }
    // Frames for a link the receiver does not know are dropped and counted.
    for _ in 0..3 {
        assert!(a.send_frame(to_b, 99, &test_frame(100, 0xa, 0)));
    }
    let want = sizes.len();
    assert!(
        run_until(
            &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
            &[7, 8],
            Duration::from_secs(10),
            |n| n[0].1.len() >= want
                && n[1].1.len() >= want
                && n[1].0.counters().dropped_unknown_link >= 3,
        ),
        "all frames arrived: a got {}, b got {} of {want}",
        got_a.len(),
        got_b.len()
    );
    for (got, uid, sender, peer) in [(&got_b, 7, 0xa, to_a), (&got_a, 8, 0xb, to_b)] {
        let mut expected: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(seq, &len)| test_frame(len, sender, seq as u16))
            .collect();
        let mut received: Vec<Vec<u8>> = got
            .iter()
            .map(|(p, u, f)| {
                assert_eq!((*p, *u), (peer, uid));
                f.clone()
            })
            .collect();
        if carrier == Carrier::Stream {
            assert!(received == expected, "the stream carrier keeps order");
        } else {
            // Datagram-sized frames keep their order; larger ones ride the stream.
            let small = |f: &&Vec<u8>| f.len() <= 1200;
            let in_order: Vec<_> = received.iter().filter(small).collect();
            let sent_order: Vec<_> = expected.iter().filter(small).collect();
            assert!(in_order == sent_order, "datagram frames keep order");
            received.sort();
            expected.sort();
            assert!(received == expected, "every frame arrived unchanged");
        }
    }
    let (ca_, cb) = (a.counters(), b.counters());
    assert_eq!(ca_.frames_sent, want as u64 + 3);
    assert_eq!(
        cb.frames_received,
        want as u64 + 3,
        "the 3 for link 99 included"
    );
    assert_eq!(cb.dropped_unknown_link, 3);
    assert_eq!((ca_.malformed, cb.malformed), (0, 0));
    if carrier == Carrier::Datagram {
        assert!(
            ca_.datagrams_sent < ca_.frames_sent,
            "small frames share datagrams: {ca_:?}"
        );
    }
}

#[test]
fn frames_of_every_size_cross_on_datagrams() {
    frames_cross(Carrier::Datagram, "pdg");
}

#[test]
fn frames_of_every_size_cross_on_a_stream() {
    frames_cross(Carrier::Stream, "pst");
}

#[test]
fn a_node_with_a_certificate_from_another_ca_is_refused() {
    let net = Underlay::new("pca");
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let rogue_ca = ClusterCa::generate("rogue-ca").unwrap();
    let mut b = bind(&net.b, ca.issue("node-b").unwrap(), "198.51.100.2:0");
    // The intruder trusts the real CA (so it accepts node-b) but shows a certificate from
    // its own; its name sorts first, so it dials.
    let rogue = rogue_ca.issue("node-0").unwrap();
    let intruder_id = NodeIdentity {
        ca_pem: ca.cert_pem(),
        ..rogue
    };
    let mut intruder = bind(&net.a, intruder_id, "198.51.100.1:0");
    let to_b = intruder
        .add_peer("node-b", b.local_addr(), Carrier::Datagram)
        .unwrap();
    b.add_peer("node-0", intruder.local_addr(), Carrier::Datagram)
        .unwrap();
    let (mut got_i, mut got_b) = (Delivered::new(), Delivered::new());
    let mut refused = false;
    run_until(
        &mut [(&mut intruder, &mut got_i), (&mut b, &mut got_b)],
        &[7],
        Duration::from_secs(3),
        |n| {
            // Try to inject all along.
            refused |= n[1].0.counters().frames_received > 0;
            false
        },
    );
    for _ in 0..10 {
        assert!(!intruder.send_frame(to_b, 7, &test_frame(100, 1, 0)));
    }
    assert!(!refused && got_b.is_empty(), "no frame got through");
    assert!(!intruder.is_up(to_b));
    let events = b.take_events();
    assert!(
        events.iter().any(|e| matches!(
            e,
            PeerEvent::Refused { remote, .. } if *remote == intruder.local_addr()
        )),
        "node-b reports the refusal with the intruder's address: {events:?}"
    );
}

#[test]
fn a_restarted_node_reconnects_and_the_wire_resumes() {
    let net = Underlay::new("prs");
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let (id_a, id_b) = (ca.issue("node-a").unwrap(), ca.issue("node-b").unwrap());
    let mut a = bind(&net.a, id_a.clone(), "198.51.100.1:0");
    let mut b = bind(&net.b, id_b.clone(), "198.51.100.2:0");
    let a_addr = a.local_addr();
    let b_addr = b.local_addr();
    let to_b = a.add_peer("node-b", b_addr, Carrier::Datagram).unwrap();
    let to_a = b.add_peer("node-a", a_addr, Carrier::Datagram).unwrap();
    let (mut got_a, mut got_b) = (Delivered::new(), Delivered::new());
    let up = |a: &mut PeerTransport,
              b: &mut PeerTransport,
              got_a: &mut Delivered,
              got_b: &mut Delivered| {
        run_until(
            &mut [(a, got_a), (b, got_b)],
            &[7],
            Duration::from_secs(15),
            |n| n[0].0.is_up(to_b) && n[1].0.is_up(to_a),
        )
    };
    assert!(up(&mut a, &mut b, &mut got_a, &mut got_b));

    // Each side in turn goes away and comes back on the same address, with no command
    // to the other side.
    for restart_a in [true, false] {
        let side = if restart_a { "a" } else { "b" };
        if restart_a {
            a.close();
            drop(a);
            a = bind(&net.a, id_a.clone(), &a_addr.to_string());
            a.add_peer("node-b", b_addr, Carrier::Datagram).unwrap();
        } else {
            b.close();
            drop(b);
            b = bind(&net.b, id_b.clone(), &b_addr.to_string());
            b.add_peer("node-a", a_addr, Carrier::Datagram).unwrap();
        }
        assert!(
            up(&mut a, &mut b, &mut got_a, &mut got_b),
            "up after {side} restarted"
        );
        got_b.clear();
        assert!(a.send_frame(to_b, 7, &test_frame(200, 0xa, 1)));
        assert!(
            run_until(
                &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
                &[7],
                Duration::from_secs(5),
                |n| !n[1].1.is_empty(),
            ),
            "a frame crosses after {side} restarted"
        );
    }
}

#[test]
fn a_crashed_node_that_is_dialed_knocks_when_it_returns_and_is_dialed_at_once() {
    let net = Underlay::new("pkn");
    let mut pair = Pair::connected(&net);
    pair.a.take_events();

    // node-a sends nothing, so only node-b's knock (or, without one, node-a's next
    // keep-alive meeting a stateless reset) tells it of the crash.
    pair.crash_b();
    pair.start_b(&net);
    let mut events = Vec::new();
    let up = pair.run(Duration::from_secs(10), |p| {
        events.extend(p.a.take_events());
        p.both_up() && events.iter().any(|e| matches!(e, PeerEvent::Up { .. }))
    });
    assert!(up, "up again; node-a saw {events:?}");
    let down = events.iter().find_map(|e| match e {
        PeerEvent::Down { reason, .. } => Some(reason.as_str()),
        _ => None,
    });
    assert!(
        down.is_some_and(|r| r.contains("knocked")),
        "node-a learned of the restart from: {down:?}"
    );
    assert_frame_crosses(&mut pair, 1);
}

#[test]
fn a_knock_replaces_a_dial_that_went_out_while_the_peer_was_down() {
    let net = Underlay::new("pkd");
    let mut pair = Pair::connected(&net);

    // node-a notices the crash (its idle timeout) and dials a node that is not there:
    // that dial's first packet is lost.
    pair.crash_b();
    let dials_before = pair.a.counters().dials;
    assert!(
        pair.run(Duration::from_secs(15), |p| p.a.counters().dials
            > dials_before),
        "node-a dials node-b again after losing it"
    );
    let stale_dials = pair.a.counters().dials;
    pair.start_b(&net);
    assert!(pair.run(Duration::from_secs(10), Pair::both_up));
    // The connection that came up is the one node-a dialed on hearing the knock, not the
    // stale dial (which would have come up only when QUIC resent its first packet).
    assert_eq!(pair.a.counters().dials, stale_dials + 1);
    assert_frame_crosses(&mut pair, 2);
}

/// Two daemons of a lab start together: node-b knocks before node-a knows it, node-a
/// refuses that knock, learns of node-b, dials it, and the two are up. QUIC then sends
/// the knock's first packet again, node-a now answers it, and node-b closes the knock
/// as moot. That close is routine: it used to reach the control plane as a refused
/// peer, two warnings in every lab's log at every start.
#[test]
fn a_knock_sent_before_the_peer_knew_this_node_ends_without_a_refusal() {
    let net = Underlay::new("pkq");
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let mut a = bind(&net.a, ca.issue("node-a").unwrap(), "198.51.100.1:0");
    let mut b = bind(&net.b, ca.issue("node-b").unwrap(), "198.51.100.2:0");
    let to_a = b
        .add_peer("node-a", a.local_addr(), Carrier::Datagram)
        .unwrap();
    let (mut got_a, mut got_b) = (Delivered::new(), Delivered::new());
    assert!(
        run_until(
            &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
            &[7],
            Duration::from_secs(2),
            |n| n[0].0.counters().handshakes_refused > 0,
        ),
        "node-a refuses the knock of a node it does not know yet"
    );
    let to_b = a
        .add_peer("node-b", b.local_addr(), Carrier::Datagram)
        .unwrap();
    let (events_a, events_b) = (Cell::new(Vec::new()), Cell::new(Vec::new()));
    let keep = |n: &mut [(&mut PeerTransport, &mut Delivered)]| {
        let mut seen = events_a.take();
        seen.extend(n[0].0.take_events());
        events_a.set(seen);
        let mut seen = events_b.take();
        seen.extend(n[1].0.take_events());
        events_b.set(seen);
    };
    assert!(run_until(
        &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
        &[7],
        Duration::from_secs(15),
        |n| {
            keep(n);
            n[0].0.is_up(to_b) && n[1].0.is_up(to_a)
        },
    ));
    // Past the knock's resends (QUIC's first one comes after about a second) and the
    // close that ends it.
    run_until(
        &mut [(&mut a, &mut got_a), (&mut b, &mut got_b)],
        &[7],
        Duration::from_secs(4),
        |n| {
            keep(n);
            false
        },
    );
    let (events_a, events_b) = (events_a.take(), events_b.take());
    for (node, events) in [("node-a", &events_a), ("node-b", &events_b)] {
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, PeerEvent::Refused { .. })),
            "{node} reported a refusal: {events:?}"
        );
        assert!(
            !events.iter().any(|e| matches!(e, PeerEvent::Down { .. })),
            "{node} lost its peer: {events:?}"
        );
    }
    assert!(a.is_up(to_b) && b.is_up(to_a));
}

fn assert_frame_crosses(pair: &mut Pair, seq: u16) {
    let before = pair.got_b.len();
    assert!(pair.a.send_frame(pair.to_b, 7, &test_frame(200, 0xa, seq)));
    assert!(
        pair.run(Duration::from_secs(5), |p| p.got_b.len() > before),
        "a frame crosses from node-a to node-b"
    );
}

#[test]
fn a_peer_that_speaks_another_version_gets_an_error_and_a_closed_connection() {
    let net = Underlay::new("pvr");
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let mut b = bind(&net.b, ca.issue("node-b").unwrap(), "198.51.100.2:0");
    let mut future = PeerConfig::new(
        ca.issue("node-0").unwrap(),
        "198.51.100.1:0".parse().unwrap(),
    );
    future.versions = 7..=9;
    let mut newer = bind_with(&net.a, future);
    let to_b = newer
        .add_peer("node-b", b.local_addr(), Carrier::Datagram)
        .unwrap();
    b.add_peer("node-0", newer.local_addr(), Carrier::Datagram)
        .unwrap();
    let (mut got_n, mut got_b) = (Delivered::new(), Delivered::new());
    let mut events_b = Vec::new();
    let mut events_n = Vec::new();
    run_until(
        &mut [(&mut newer, &mut got_n), (&mut b, &mut got_b)],
        &[7],
        Duration::from_secs(3),
        |n| {
            events_n.extend(n[0].0.take_events());
            events_b.extend(n[1].0.take_events());
            !events_n.is_empty() && !events_b.is_empty()
        },
    );
    assert!(!newer.is_up(to_b));
    assert!(
        events_b.iter().any(|e| matches!(
            e,
            PeerEvent::Refused { reason, .. } if reason.contains("7..=9")
        )),
        "{events_b:?}"
    );
    // The newer node hears why: the close carries node-b's versions.
    let ours = format!(
        "speaks versions {}..={}",
        xwire_proto::control::MIN_PROTOCOL_VERSION,
        xwire_proto::control::PROTOCOL_VERSION
    );
    assert!(
        events_n.iter().any(|e| matches!(
            e,
            PeerEvent::Refused { reason, .. } if reason.contains(&ours)
                || reason.contains("7..=9")
        )),
        "{events_n:?}"
    );
}

/// How often the slow receiver of the overload test reads its socket.
const SLOW_READS: Duration = Duration::from_millis(50);

/// Offered far more than the far end reads, a datagram wire stops overflowing the far
/// end's socket once its loss is sustained: the sender's window closes (`congestion.rs`),
/// and what the receiver cannot take is dropped at the sender, before it is encrypted and
/// sent. Without that response node-b's socket kept losing most of what node-a sent.
#[test]
fn a_receiver_that_falls_behind_stops_overflowing_and_the_sender_drops_instead() {
    let net = Underlay::new("pov");
    let mut pair = Pair::connected(&net);
    let overflowed = || net.b.udp_counter("RcvbufErrors").unwrap();
    let window = |pair: &mut Pair| pair.a.endpoint_mut().peer_stats()[0].congestion_window;
    let frame = test_frame(1000, 0xa, 0);
    let received = Cell::new(0u64);
    // node-a offers all it can; node-b reads one poll's worth every SLOW_READS.
    let flood = |pair: &mut Pair, limit: Duration| {
        let start = Instant::now();
        let mut read_at = start;
        while start.elapsed() < limit {
            for _ in 0..64 {
                pair.a.send_frame(pair.to_b, 7, &frame);
            }
            pair.a.poll_frames(Flush::Now, &mut |_, _, _| true);
            if read_at.elapsed() >= SLOW_READS {
                let b = pair.b.as_mut().expect("node-b is up");
                b.poll_frames(Flush::Now, &mut |_, uid, _| {
                    received.set(received.get() + 1);
                    uid == 7
                });
                read_at = Instant::now();
            }
        }
    };
    // The overload, until the window answers it (a round trip here is hundreds of
    // milliseconds: node-b acknowledges only when it reads), and a second for the losses
    // of what was sent before the cap to be counted.
    let start = Instant::now();
    while window(&mut pair) > u64::from(u32::MAX) && start.elapsed() < Duration::from_secs(15) {
        flood(&mut pair, Duration::from_millis(100));
    }
    flood(&mut pair, Duration::from_secs(1));
    let (lost_before, a_before, received_before) =
        (overflowed(), pair.a.counters(), received.get());
    flood(&mut pair, Duration::from_secs(2));
    let (lost_after, a_after, received_after) = (overflowed(), pair.a.counters(), received.get());

    assert!(
        lost_before > 0,
        "node-b fell behind far enough to overflow its socket"
    );
    let (lost, delivered) = (lost_after - lost_before, received_after - received_before);
    assert!(delivered > 0, "node-b still got frames");
    assert!(
        lost * 100 <= delivered,
        "once the window closed, node-b's socket lost {lost} datagrams while it took \
         {delivered} frames (before: {lost_before} lost)"
    );
    assert!(
        a_after.dropped_blocked > a_before.dropped_blocked,
        "node-a dropped what node-b could not take: {a_before:?} then {a_after:?}"
    );
    let window = window(&mut pair);
    assert!(
        window <= u64::from(u32::MAX),
        "node-a's window closed under the overload: {window}"
    );
}
