//! The switch carries remote wires through whatever `RemoteTransport` its worker is
//! given, not only QUIC: two node namespaces, a pod behind each, each node's worker
//! handed a transport that sends each frame as one plain UDP datagram (wire-proto's frame
//! record, no encryption, no connection). Pings cross it both ways, counted on the link
//! and by the transport.

use std::collections::VecDeque;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use xwire_fastpath::peer::{Carrier, ControlMessage, PeerEvent, PeerId, TransportCounters};
use xwire_fastpath::remote_transport::{
    Flush, NotSent, PeerError, Polled, ReceivedFrame, RemoteTransport,
};
use xwire_fastpath::stats::PeerStats;
use xwire_fastpath::{Direction, PortChoice, Worker, WorkerConfig};
use xwire_proto::data::FrameRepr;
use xwire_proto::WireId;
use xwire_testbed::checks::ping;
use xwire_testbed::{unique_ifname, Netns, Veth};

const UID: WireId = WireId(7);
/// Datagrams one `poll` takes at most, so that a flood cannot hold the worker.
const RECV_PER_POLL: usize = 256;

/// Frames as single UDP datagrams to peers named by address.
struct PlainUdp {
    socket: UdpSocket,
    peers: Vec<(String, SocketAddr)>,
    /// Frames received and not yet taken, and the one taken last (lent out).
    received: VecDeque<(PeerId, WireId, Vec<u8>)>,
    lent: Option<(PeerId, WireId, Vec<u8>)>,
    events: Vec<PeerEvent>,
    counters: TransportCounters,
    buf: Vec<u8>,
}

impl PlainUdp {
    fn bind(addr: SocketAddr) -> std::io::Result<PlainUdp> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(PlainUdp {
            socket,
            peers: Vec::new(),
            received: VecDeque::new(),
            lent: None,
            events: Vec::new(),
            counters: TransportCounters::default(),
            buf: vec![0; 65536],
        })
    }
}

impl RemoteTransport for PlainUdp {
    fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr().expect("bound")
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    fn send_frame(
        &mut self,
        _now: Instant,
        peer: PeerId,
        wire: WireId,
        frame: &[u8],
        _carrier: Option<Carrier>,
    ) -> Result<(), NotSent> {
        let Some((_, addr)) = self.peers.get(peer.0 as usize) else {
            self.counters.dropped_no_peer += 1;
            return Err(NotSent::NotConnected);
        };
        let mut record = Vec::with_capacity(frame.len() + 16);
        FrameRepr { wire, frame }
            .append_to(&mut record)
            .expect("a frame record fits");
        match self.socket.send_to(&record, addr) {
            Ok(_) => {
                self.counters.frames_sent += 1;
                Ok(())
            }
            Err(_) => {
                self.counters.udp_send_failed += 1;
                Err(NotSent::CarrierFull)
            }
        }
    }

    fn poll(&mut self, _flush: Flush) -> Polled {
        let mut polled = Polled::default();
        while polled.datagrams < RECV_PER_POLL {
            let Ok((len, from)) = self.socket.recv_from(&mut self.buf) else {
                return polled;
            };
            polled.datagrams += 1;
            let peer = self.peers.iter().position(|(_, addr)| *addr == from);
            match (peer, FrameRepr::parse(&self.buf[..len])) {
                (Some(peer), Ok((record, _))) => {
                    self.counters.frames_received += 1;
                    let frame = record.frame.to_vec();
                    self.received
                        .push_back((PeerId(peer as u32), record.wire, frame));
                }
                (None, _) => self.counters.dropped_no_peer += 1,
                (_, Err(_)) => self.counters.malformed += 1,
            }
        }
        polled.more = true;
        polled
    }

    fn next_frame(&mut self) -> Option<ReceivedFrame<'_>> {
        self.lent = Some(self.received.pop_front()?);
        let (peer, wire, frame) = self.lent.as_ref()?;
        Some(ReceivedFrame {
            peer: *peer,
            wire: *wire,
            frame,
            on_stream: false,
        })
    }

    fn count_unknown_link(&mut self) {
        self.counters.dropped_unknown_link += 1;
    }

    fn timeout(&mut self) -> Option<Duration> {
        None
    }

    fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        _carrier: Carrier,
        _now: Instant,
    ) -> Result<PeerId, PeerError> {
        let peer = PeerId(self.peers.len() as u32);
        self.peers.push((name.to_owned(), addr));
        self.events.push(PeerEvent::Up {
            peer,
            name: name.to_owned(),
            version: 1,
        });
        Ok(peer)
    }

    fn retire_peer(&mut self, peer: PeerId, _now: Instant) -> bool {
        (peer.0 as usize) < self.peers.len()
    }

    fn send_control(&mut self, _now: Instant, _peer: PeerId, _message: &ControlMessage) -> bool {
        false
    }

    fn counters(&self) -> TransportCounters {
        self.counters
    }

    fn peer_stats(&mut self) -> Vec<PeerStats> {
        (self.peers.iter())
            .map(|(name, _)| PeerStats {
                name: name.clone(),
                up: true,
                ..Default::default()
            })
            .collect()
    }

    fn take_events(&mut self) -> Vec<PeerEvent> {
        std::mem::take(&mut self.events)
    }

    fn close(&mut self) {}
}

#[test]
fn a_remote_wire_crosses_a_transport_that_is_not_quic() {
    let nodes = ["a", "b"].map(|side| {
        (
            Netns::new(&format!("seam-n{side}")).unwrap(),
            Netns::new(&format!("seam-p{side}")).unwrap(),
        )
    });
    let underlay = Veth::named(&nodes[0].0, "ul0", &nodes[1].0, "ul0").unwrap();
    underlay.set_up().unwrap();
    let mut veths = vec![underlay];
    let mut workers = Vec::new();
    let mut ports = Vec::new();
    let mut addrs = Vec::new();
    for (i, (node, pod)) in nodes.iter().enumerate() {
        let underlay_ip = format!("198.51.100.{}", i + 1);
        node.add_address("ul0", &format!("{underlay_ip}/24"))
            .unwrap();
        let pod_wire = Veth::named(pod, "eth1", node, &unique_ifname()).unwrap();
        pod.set_tx_checksum("eth1", false).unwrap();
        pod_wire.set_up().unwrap();
        pod.add_address("eth1", &format!("192.0.2.{}/30", i + 1))
            .unwrap();
        let worker = node
            .run(|| Worker::spawn(WorkerConfig::default()))
            .unwrap()
            .unwrap();
        let port = worker
            .add_port_as(pod_wire.b_name(), 1514, Some(PortChoice::AfXdp))
            .unwrap();
        let listen: SocketAddr = format!("{underlay_ip}:0").parse().unwrap();
        let addr = worker
            .attach_transport(Box::new(move || {
                PlainUdp::bind(listen)
                    .map(|t| Box::new(t) as Box<dyn RemoteTransport>)
                    .map_err(|cause| PeerError::Socket {
                        addr: listen,
                        cause,
                    })
            }))
            .unwrap();
        assert_eq!(addr.ip(), listen.ip(), "bound in the node's namespace");
        workers.push(worker);
        ports.push(port);
        addrs.push(addr);
        veths.push(pod_wire);
    }
    let mut counters = Vec::new();
    for i in 0..2 {
        let other = 1 - i;
        let peer = workers[i]
            .add_peer(&format!("node-{other}"), addrs[other], Carrier::Datagram)
            .unwrap();
        counters.push(
            workers[i]
                .add_remote_link(UID, ports[i].id, peer, None)
                .unwrap(),
        );
    }
    assert!(ping(&nodes[0].1, "192.0.2.2", 3).unwrap(), "ping a -> b");
    assert!(ping(&nodes[1].1, "192.0.2.1", 3).unwrap(), "ping b -> a");
    for (i, worker) in workers.iter().enumerate() {
        let to_peer = counters[i].snapshot(Direction::AToB);
        let from_peer = counters[i].snapshot(Direction::BToA);
        assert!(
            to_peer.frames >= 3 && from_peer.frames >= 3,
            "node {i}: {to_peer:?} {from_peer:?}"
        );
        let (transport, events) = worker.peer_status().unwrap();
        assert!(
            transport.frames_sent >= 3 && transport.frames_received >= 3,
            "node {i}: {transport:?}"
        );
        assert_eq!(transport.malformed + transport.dropped_unknown_link, 0);
        assert!(
            matches!(events.first(), Some(PeerEvent::Up { .. })),
            "node {i}: {events:?}"
        );
    }
}
