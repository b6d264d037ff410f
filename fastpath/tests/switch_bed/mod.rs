//! Two pod namespaces joined by veths to a node namespace, where a worker links the
//! node-side ends: the bed of the switch's tests and the impairment tests.

#![allow(dead_code)]

use std::sync::Arc;

use xwire_fastpath::{LinkCounters, PortChoice, PortInfo, PortKind, Worker, WorkerConfig};
use xwire_testbed::{unique_ifname, Netns, Veth};

/// Two pods, a node, and the node-side ends of the pods' veths.
pub struct Bed {
    pub pod_a: Netns,
    pub pod_b: Netns,
    pub node: Netns,
}

impl Bed {
    pub fn new(label: &str) -> Bed {
        Bed {
            pod_a: Netns::new(&format!("{label}-a")).unwrap(),
            pod_b: Netns::new(&format!("{label}-b")).unwrap(),
            node: Netns::new(&format!("{label}-node")).unwrap(),
        }
    }

    /// A veth from `pod:eth1` to a uniquely named end in the node, both up, with the
    /// pod's TX checksum offload off (frames must carry real checksums through a
    /// userspace switch).
    pub fn wire<'a>(&'a self, pod: &'a Netns) -> Veth<'a> {
        let veth = Veth::named(pod, "eth1", &self.node, &unique_ifname()).unwrap();
        pod.set_tx_checksum("eth1", false).unwrap();
        veth.set_up().unwrap();
        veth
    }

    pub fn worker(&self) -> Worker {
        self.worker_with(WorkerConfig::default())
    }

    pub fn worker_with(&self, config: WorkerConfig) -> Worker {
        self.node.run(|| Worker::spawn(config)).unwrap().unwrap()
    }
}

/// A bed whose two pods are linked by the switch as link 1.
pub struct Linked<'a> {
    pub worker: Worker,
    pub ports: [PortInfo; 2],
    pub counters: Arc<LinkCounters>,
    pub _wires: [Veth<'a>; 2],
}

pub fn link(bed: &Bed) -> Linked<'_> {
    link_with(bed, 1500, [PortChoice::AfXdp; 2])
}

/// Links the pods through ports of the given kinds (pod A's first).
pub fn link_with(bed: &Bed, mtu: u32, kinds: [PortChoice; 2]) -> Linked<'_> {
    link_on(bed, bed.worker(), mtu, kinds)
}

/// As `link_with`, through `worker`.
pub fn link_on(bed: &Bed, worker: Worker, mtu: u32, kinds: [PortChoice; 2]) -> Linked<'_> {
    let wires = [bed.wire(&bed.pod_a), bed.wire(&bed.pod_b)];
    for wire in &wires {
        wire.set_mtu(mtu).unwrap();
    }
    let max_frame = mtu as usize + 14;
    let pa = worker
        .add_port_as(wires[0].b_name(), max_frame, Some(kinds[0]))
        .unwrap();
    let pb = worker
        .add_port_as(wires[1].b_name(), max_frame, Some(kinds[1]))
        .unwrap();
    for (port, choice) in [(&pa, kinds[0]), (&pb, kinds[1])] {
        let packet = port.kind == PortKind::AfPacket;
        assert_eq!(
            packet,
            choice == PortChoice::AfPacket,
            "{}",
            port.kind.name()
        );
    }
    let counters = worker
        .add_link(xwire_proto::WireId(1), pa.id, pb.id)
        .unwrap();
    Linked {
        worker,
        ports: [pa, pb],
        counters,
        _wires: wires,
    }
}
