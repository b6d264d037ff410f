//! The AF_XDP switch with real frames: two pod namespaces, each joined by a veth to a node
//! namespace where a worker links the two node-side ends (these tests need root).

use std::process::Command;

use xwire_fastpath::{Direction, Worker, WorkerConfig};
use xwire_perf::testbed::{Netns, Veth};

struct Bed {
    node: Netns,
    pod_a: Netns,
    pod_b: Netns,
}

fn bed(label: &str) -> Bed {
    Bed {
        node: Netns::new(&format!("{label}-node")).unwrap(),
        pod_a: Netns::new(&format!("{label}-a")).unwrap(),
        pod_b: Netns::new(&format!("{label}-b")).unwrap(),
    }
}

fn ping(from: &Netns, to: &str, count: u32) -> bool {
    from.exec(Command::new("ping").args(["-c", &count.to_string(), "-i", "0.2", "-W", "1", to]))
        .unwrap()
        .status
        .success()
}

#[test]
fn pods_linked_by_the_switch_ping_and_unlinking_stops_it() {
    let b = bed("xsw");
    let wire_a = Veth::named(
        &b.pod_a,
        "eth1",
        &b.node,
        &xwire_perf::testbed::unique_ifname(),
    )
    .unwrap();
    let wire_b = Veth::named(
        &b.pod_b,
        "eth1",
        &b.node,
        &xwire_perf::testbed::unique_ifname(),
    )
    .unwrap();
    for w in [&wire_a, &wire_b] {
        w.set_up().unwrap();
    }
    b.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
    b.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();

    let worker = b
        .node
        .run(|| Worker::spawn(WorkerConfig::default()))
        .unwrap()
        .unwrap();
    let pa = worker.add_port(wire_a.b_name(), 1514).unwrap();
    let pb = worker.add_port(wire_b.b_name(), 1514).unwrap();
    eprintln!("ports: {pa:?} {pb:?}");
    let counters = worker.add_link(1, pa.id, pb.id).unwrap();

    assert!(ping(&b.pod_a, "192.0.2.2", 3), "ping across the switch");
    let ab = counters.snapshot(Direction::AToB);
    let ba = counters.snapshot(Direction::BToA);
    assert!(ab.frames >= 3 && ba.frames >= 3, "{ab:?} {ba:?}");

    assert!(worker.remove_link(1).unwrap());
    assert!(
        !ping(&b.pod_a, "192.0.2.2", 1),
        "ping after the link was removed"
    );
}
