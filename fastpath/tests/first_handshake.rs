//! A node's first peer connection does not hold its worker off its ports. The TLS
//! provider (aws-lc) seeds its random generator the first time a process draws from it,
//! from CPU timing jitter, 60 to 70 ms of one thread's time here; the first handshake
//! drew first, inside the worker, and every port of that worker waited. `attach_peers`
//! now draws once on the caller's thread. This file holds one test so that it runs in a
//! process of its own, where nothing has drawn before.

use std::time::{Duration, Instant};

use xwire_fastpath::peer::{Carrier, PeerConfig, PeerEvent};
use xwire_fastpath::{PortChoice, Worker, WorkerConfig};
use xwire_pki::ClusterCa;
use xwire_testbed::{unique_ifname, Netns, Veth};

/// The count of `AwayTimes::over` this test reads: returns after more than 16 ms, longer
/// than any absence a handshake costs the worker once the generator is seeded, and
/// shorter than the seeding.
const LONG: usize = 2;

#[test]
fn a_nodes_first_peer_connection_does_not_hold_its_workers_off_their_ports() {
    let node_names = ["node-a", "node-b"];
    let nodes = [Netns::new("xfh-a").unwrap(), Netns::new("xfh-b").unwrap()];
    let pods = [Netns::new("xfh-pa").unwrap(), Netns::new("xfh-pb").unwrap()];
    let underlay = Veth::named(&nodes[0], "ul0", &nodes[1], "ul0").unwrap();
    underlay.set_up().unwrap();
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let mut wires = Vec::new();
    let mut workers = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..2 {
        let address = format!("198.51.100.{}", i + 1);
        nodes[i]
            .add_address("ul0", &format!("{address}/24"))
            .unwrap();
        let wire = Veth::named(&pods[i], "eth1", &nodes[i], &unique_ifname()).unwrap();
        wire.set_up().unwrap();
        let worker = nodes[i]
            .run(|| Worker::spawn(WorkerConfig::default()))
            .unwrap()
            .unwrap();
        // The worker has a port to be away from (opening it is an absence of its own).
        worker
            .add_port_as(wire.b_name(), 1514, Some(PortChoice::AfXdp))
            .unwrap();
        let config = PeerConfig::new(
            ca.issue(node_names[i]).unwrap(),
            format!("{address}:0").parse().unwrap(),
        );
        addrs.push(worker.attach_peers(config).unwrap());
        workers.push(worker);
        wires.push(wire);
    }
    let before: Vec<u64> = workers
        .iter()
        .map(|w| w.stats().unwrap().away.over[LONG])
        .collect();
    for i in 0..2 {
        workers[i]
            .add_peer(node_names[1 - i], addrs[1 - i], Carrier::Datagram)
            .unwrap();
    }
    let start = Instant::now();
    let mut up = [false, false];
    while !(up[0] && up[1]) && start.elapsed() < Duration::from_secs(10) {
        for i in 0..2 {
            let (_, events) = workers[i].peer_status().unwrap();
            up[i] |= events.iter().any(|e| matches!(e, PeerEvent::Up { .. }));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(up, [true, true], "both peers came up");
    // An absence is counted when the next pass starts: a second answer follows a pass.
    for worker in &workers {
        worker.stats().unwrap();
    }
    let after: Vec<(u64, Duration)> = workers
        .iter()
        .map(|w| {
            let away = w.stats().unwrap().away;
            (away.over[LONG], away.longest)
        })
        .collect();
    for i in 0..2 {
        assert_eq!(
            after[i].0, before[i],
            "{}'s worker was away over 16 ms while its peer connected (longest {:?})",
            node_names[i], after[i].1
        );
    }
}
