//! The switch with real frames: two pod namespaces, each joined by a veth to a node
//! namespace where a worker links the two node-side ends through AF_XDP or AF_PACKET
//! ports, or one of each (these tests need root).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use xwire_fastpath::{
    Direction, PortChoice, PortError, PortId, PortKind, Worker, WorkerConfig, WorkerError, XdpMode,
};
use xwire_testbed::checks::{self, test_frame};
use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

mod switch_bed;
use switch_bed::{link, link_with, Bed, Linked};

fn ping(from: &Netns, to: &str, count: u32) -> bool {
    checks::ping(from, to, count).unwrap()
}

#[test]
fn pods_linked_by_the_switch_ping_and_unlinking_stops_it() {
    let bed = Bed::new("xsw-ping");
    let linked = link(&bed);
    bed.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
    bed.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();
    assert!(ping(&bed.pod_a, "192.0.2.2", 3), "ping across the switch");
    let ab = linked.counters.snapshot(Direction::AToB);
    let ba = linked.counters.snapshot(Direction::BToA);
    assert!(ab.frames >= 3 && ba.frames >= 3, "{ab:?} {ba:?}");
    assert!(linked.worker.remove_link(xwire_proto::WireId(1)).unwrap());
    assert!(
        !ping(&bed.pod_a, "192.0.2.2", 1),
        "ping after the link was removed"
    );
}

/// Sends frames of `sizes` from each pod to the other at the same time, and checks that
/// they arrive unchanged and in order, and that the link counted exactly them.
fn exchange(bed: &Bed, linked: &Linked<'_>, sizes: &[usize]) {
    let sock_a = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    let sock_b = RawSocket::open(&bed.pod_b, "eth1").unwrap();
    // At most `IN_FLIGHT` frames each way are on their way at once: far below the rings'
    // size, so that a worker kept off the CPU by other tests (the full suite) cannot make
    // the kernel drop a frame for want of a buffer, and the test asks for every frame.
    const IN_FLIGHT: usize = 8;
    let arrived = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let send = |sock: &RawSocket, sender: u8, arrived: &AtomicUsize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        for (seq, &len) in sizes.iter().enumerate() {
            while arrived.load(Ordering::Acquire) + IN_FLIGHT <= seq && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(50));
            }
            sock.send(&test_frame(len, sender, seq as u16)).unwrap();
        }
    };
    let receive = |sock: &RawSocket, sender: u8, arrived: &AtomicUsize| {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < sizes.len() && Instant::now() < deadline {
            if let Some(frame) = sock.recv(Duration::from_millis(200)).unwrap() {
                if frame.get(11) == Some(&sender) && frame.get(12..14) == Some(&[0x88, 0xb5]) {
                    got.push(frame);
                    arrived.store(got.len(), Ordering::Release);
                }
            }
        }
        got
    };
    let (at_b, at_a) = std::thread::scope(|s| {
        let rx_b = s.spawn(|| receive(&sock_b, 0xa, &arrived[0]));
        let rx_a = s.spawn(|| receive(&sock_a, 0xb, &arrived[1]));
        s.spawn(|| send(&sock_a, 0xa, &arrived[0]));
        s.spawn(|| send(&sock_b, 0xb, &arrived[1]));
        (rx_b.join().unwrap(), rx_a.join().unwrap())
    });
    for (got, sender) in [(&at_b, 0xa), (&at_a, 0xb)] {
        assert_eq!(
            got.len(),
            sizes.len(),
            "frames from {sender:x} that arrived"
        );
        for (seq, (frame, &len)) in got.iter().zip(sizes).enumerate() {
            assert!(
                *frame == test_frame(len, sender, seq as u16),
                "frame {seq} ({len} bytes) from {sender:x} changed"
            );
        }
    }
    let bytes: u64 = sizes.iter().map(|&s| s as u64).sum();
    for direction in [Direction::AToB, Direction::BToA] {
        let c = linked.counters.snapshot(direction);
        assert_eq!(
            (c.frames, c.bytes, c.total_drops()),
            (sizes.len() as u64, bytes, 0),
            "{direction:?}"
        );
    }
    for port in &linked.ports {
        let drops = linked.worker.kernel_drops(port.id).unwrap();
        assert_eq!(drops.total(), 0, "{}: {drops:?}", port.ifname);
    }
}

fn standard_sizes() -> Vec<usize> {
    (60..1514).step_by(7).chain([1514]).collect()
}

fn jumbo_sizes() -> Vec<usize> {
    (60..=9000)
        .step_by(61)
        .chain([4096, 4097, 8192, 9000, 9014])
        .collect()
}

const XDP: [PortChoice; 2] = [PortChoice::AfXdp; 2];
const PACKET: [PortChoice; 2] = [PortChoice::AfPacket; 2];
const MIXED: [PortChoice; 2] = [PortChoice::AfXdp, PortChoice::AfPacket];

fn frames_cross(label: &str, mtu: u32, kinds: [PortChoice; 2], sizes: &[usize]) {
    let bed = Bed::new(label);
    let linked = link_with(&bed, mtu, kinds);
    exchange(&bed, &linked, sizes);
}

#[test]
fn frames_cross_unchanged_and_in_order_both_ways_at_once_af_xdp() {
    frames_cross("xsw-fx", 1500, XDP, &standard_sizes());
}

#[test]
fn frames_cross_unchanged_and_in_order_both_ways_at_once_af_packet() {
    frames_cross("xsw-fp", 1500, PACKET, &standard_sizes());
}

#[test]
fn frames_cross_between_an_af_xdp_and_an_af_packet_port() {
    frames_cross("xsw-fm", 1500, MIXED, &standard_sizes());
}

#[test]
fn jumbo_frames_cross_unchanged_af_xdp_descriptor_chains() {
    frames_cross("xsw-jx", 9000, XDP, &jumbo_sizes());
}

#[test]
fn jumbo_frames_cross_unchanged_af_packet() {
    frames_cross("xsw-jp", 9000, PACKET, &jumbo_sizes());
}

#[test]
fn jumbo_frames_cross_between_an_af_xdp_and_an_af_packet_port() {
    frames_cross("xsw-jm", 9000, MIXED, &jumbo_sizes());
}

fn tcp_transfer(label: &str, kinds: [PortChoice; 2]) {
    const BYTES: usize = 16 << 20;
    let bed = Bed::new(label);
    let _linked = link_with(&bed, 1500, kinds);
    bed.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
    bed.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();
    let to = "192.0.2.2:5201".parse().unwrap();
    let received = checks::tcp_transfer(&bed.pod_a, &bed.pod_b, to, BYTES).unwrap();
    assert!(
        received == checks::pattern(BYTES),
        "{} of {BYTES} bytes, content equal: false",
        received.len()
    );
}

#[test]
fn a_tcp_transfer_crosses_the_switch_af_xdp() {
    tcp_transfer("xsw-tx", XDP);
}

#[test]
fn a_tcp_transfer_crosses_the_switch_af_packet() {
    tcp_transfer("xsw-tp", PACKET);
}

#[test]
fn auto_chooses_af_xdp_and_reports_the_mode() {
    let bed = Bed::new("xsw-auto");
    let wire = bed.wire(&bed.pod_a);
    let worker = bed.worker();
    let port = worker.add_port(wire.b_name(), 1514).unwrap();
    assert_eq!(
        port.kind,
        PortKind::AfXdp(XdpMode::Native),
        "{}",
        port.kind.name()
    );
}

#[test]
fn a_batch_of_remote_ports_opens_each_and_closes_one_that_cannot_join() {
    use xwire_fastpath::peer::{Carrier, PeerConfig};
    use xwire_fastpath::RemotePort;
    use xwire_pki::ClusterCa;

    let bed = Bed::new("xsw-rpb");
    let wires = [bed.wire(&bed.pod_a), bed.wire(&bed.pod_b)];
    let lonely = bed.worker();
    let worker = bed.worker();
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let config = PeerConfig::new(ca.issue("node-a").unwrap(), "127.0.0.1:0".parse().unwrap());
    worker.attach_peers(config).unwrap();
    // Nobody listens there: the ports only need a peer to be joined to.
    let peer = worker
        .add_peer("node-b", "127.0.0.1:9".parse().unwrap(), Carrier::Datagram)
        .unwrap();
    let spec = |ifname: &str, uid| RemotePort {
        ifname: ifname.into(),
        max_frame: 1514,
        wire: xwire_proto::WireId(uid),
        peer,
        carrier: None,
    };
    let results = worker.add_remote_ports(&[
        spec(wires[0].b_name(), 7),
        spec("no-such-if0", 8),
        // The wire id is taken: the port opens, cannot join, and is closed again.
        spec(wires[1].b_name(), 7),
    ]);
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].as_ref().unwrap().ifname, wires[0].b_name());
    assert!(
        matches!(
            &results[1],
            Err(WorkerError::Port(PortError::NoSuchInterface(_)))
        ),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(&results[2], Err(WorkerError::Link(_))),
        "{:?}",
        results[2]
    );
    // Closed again: the interface can be had, once the kernel has released it.
    let again = worker.add_remote_ports(&[spec(wires[1].b_name(), 9)]);
    assert!(again[0].is_ok(), "{:?}", again[0]);
    // A worker with no peer transport opens nothing it cannot join (on an interface
    // no other worker has had: the kernel releases a closed socket's interface a moment
    // later, and only the worker that closed it knows to wait for that).
    let pod_c = Netns::new("xsw-rpb-c").unwrap();
    let third = Veth::named(&pod_c, "eth1", &bed.node, &unique_ifname()).unwrap();
    third.set_up().unwrap();
    let orphan = lonely.add_remote_ports(&[spec(third.b_name(), 7)]);
    assert!(
        matches!(&orphan[0], Err(WorkerError::NoPeers)),
        "{:?}",
        orphan[0]
    );
    let port = lonely.add_port(third.b_name(), 1514);
    assert!(port.is_ok(), "the port was closed again: {port:?}");
}

#[test]
fn a_bad_port_is_a_clear_error_and_the_worker_keeps_serving() {
    let bed = Bed::new("xsw-bad");
    let linked = link(&bed);
    bed.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
    bed.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();

    let missing = linked.worker.add_port("no-such-if0", 1514).unwrap_err();
    assert!(
        matches!(missing, WorkerError::Port(PortError::NoSuchInterface(_))),
        "{missing}"
    );
    assert!(missing.to_string().contains("no-such-if0"), "{missing}");

    // A second worker finds the interface held by the first one's XDP program.
    let other = bed.worker();
    let held = other.add_port(&linked.ports[0].ifname, 1514).unwrap_err();
    assert!(
        matches!(held, WorkerError::Port(PortError::Busy(ref name)) if *name == linked.ports[0].ifname),
        "{held}"
    );

    assert!(
        ping(&bed.pod_a, "192.0.2.2", 2),
        "the first worker still forwards"
    );
    let unknown = linked.worker.kernel_drops(PortId(99)).unwrap_err();
    assert!(
        matches!(unknown, WorkerError::NoSuchPort(PortId(99))),
        "{unknown}"
    );
}

#[test]
fn ports_closed_and_opened_again_many_times_keep_forwarding() {
    // 64 frames per port: a closed port whose frames were not all given back, or a UMEM
    // that outlived its ports, would leave the reopened ports unable to receive or open
    // within a few rounds.
    const ROUNDS: u16 = 30;
    const FRAMES: u16 = 100;
    let bed = Bed::new("xsw-reopen");
    let wires = [bed.wire(&bed.pod_a), bed.wire(&bed.pod_b)];
    let config = WorkerConfig {
        max_ports: 2,
        frames_per_port: 64,
        ..WorkerConfig::default()
    };
    let worker = bed.node.run(|| Worker::spawn(config)).unwrap().unwrap();
    let sock_a = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    let sock_b = RawSocket::open(&bed.pod_b, "eth1").unwrap();
    for round in 0..ROUNDS {
        // Opened again at once on the same interfaces: the kernel may not have released
        // the last round's sockets yet, which the worker waits out.
        let [pa, pb] = [&wires[0], &wires[1]].map(|w| {
            worker
                .add_port_as(w.b_name(), 1514, Some(PortChoice::AfXdp))
                .unwrap_or_else(|e| panic!("round {round}: {e}"))
        });
        let counters = worker
            .add_link(xwire_proto::WireId(1), pa.id, pb.id)
            .unwrap();
        // One frame in flight at a time: more frames pass than the port has, so each
        // must be given back to the fill ring, and a worker kept off the CPU by the
        // machine's other work cannot make the kernel drop one (it would be counted in
        // `rx_fill_ring_empty`, but it would say nothing of the reopening).
        let mut got = 0;
        for seq in 0..FRAMES {
            sock_a.send(&test_frame(200, 0xa, seq)).unwrap();
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                let Some(frame) = sock_b.recv(Duration::from_millis(100)).unwrap() else {
                    continue;
                };
                let ours = frame.get(11) == Some(&0xa) && frame.get(12..14) == Some(&[0x88, 0xb5]);
                if ours && frame.get(14..16) == Some(&seq.to_be_bytes()[..]) {
                    got += 1;
                    break;
                }
            }
        }
        let c = counters.snapshot(Direction::AToB);
        let stats = worker.stats().unwrap();
        let drops = stats
            .links
            .iter()
            .find(|l| l.wire == xwire_proto::WireId(1))
            .map(|l| l.kernel_drops);
        assert_eq!(got, FRAMES, "round {round}: {c:?}, kernel drops {drops:?}");
        assert!(worker.remove_link(xwire_proto::WireId(1)).unwrap());
        worker.remove_port(pa.id).unwrap();
        worker.remove_port(pb.id).unwrap();
    }
}

/// A worker with more ports than it peeks at in every pass (it then visits only those
/// that are readable or have frames to send): the two ports linked last, among 70 idle
/// ones, carry frames both ways unchanged and in order, AF_XDP and AF_PACKET alike.
#[test]
fn a_worker_with_many_ports_serves_the_ones_with_frames() {
    const IDLE: usize = 70;
    for (label, kinds) in [
        ("xsw-many-x", [PortChoice::AfXdp; 2]),
        ("xsw-many-p", [PortChoice::AfPacket; 2]),
    ] {
        let bed = Bed::new(label);
        let idle_pods = Netns::new(&format!("{label}-idle")).unwrap();
        let config = WorkerConfig {
            max_ports: IDLE + 2,
            frames_per_port: 64,
            ..WorkerConfig::default()
        };
        let worker = bed.worker_with(config);
        let idle: Vec<Veth<'_>> = (0..IDLE)
            .map(|i| {
                let veth =
                    Veth::named(&idle_pods, &format!("e{i}"), &bed.node, &unique_ifname()).unwrap();
                veth.set_up().unwrap();
                worker
                    .add_port_as(veth.b_name(), 1514, Some(kinds[0]))
                    .unwrap();
                veth
            })
            .collect();
        let linked = switch_bed::link_on(&bed, worker, 1500, kinds);
        assert!(
            linked.ports[0].id.0 as usize >= IDLE,
            "{:?}",
            linked.ports[0].id
        );
        exchange(&bed, &linked, &standard_sizes());
        drop(idle);
    }
}
