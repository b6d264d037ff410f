//! The driver of a node's `PeerEndpoint`: its UDP socket and the clock. It reads UDP into
//! the endpoint, writes what the endpoint wants sent, and says when it wants time again;
//! every decision is the endpoint's.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use xwire_proto::control::{Carrier, ControlMessage};
use xwire_proto::WireId;

use super::endpoint::{NotSent, PeerEndpoint};
use super::inbox::ReceivedFrame;
use super::transmit::{Flush, Transmit};
use super::udp::Udp;
use super::{PeerConfig, PeerError, PeerEvent, PeerId, TransportCounters};

/// Receive batches per `poll`: a few, so that sending gets its turn under load.
const RECV_ROUNDS: usize = 4;

/// How often the wait of datagrams in the socket is read (a system call) while they come.
const WAIT_READING_INTERVAL: Duration = Duration::from_millis(1);

/// What one `PeerTransport::poll` took.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    /// UDP datagrams that arrived.
    pub datagrams: usize,
    /// It stopped receiving with datagrams left in the socket, perhaps.
    pub more: bool,
}

pub struct PeerTransport {
    udp: Udp,
    endpoint: PeerEndpoint,
    transmit_buf: Vec<u8>,
    /// QUIC packets the socket would not take (its buffer full).
    udp_send_failed: u64,
    /// When the socket's wait is next read.
    next_wait_reading: Instant,
}

impl PeerTransport {
    /// Binds the UDP socket (in the calling thread's network namespace).
    pub fn bind(config: PeerConfig) -> Result<PeerTransport, PeerError> {
        let endpoint = PeerEndpoint::new(&config)?;
        let udp = Udp::bind(config.listen)?;
        Ok(PeerTransport {
            udp,
            endpoint,
            transmit_buf: Vec::with_capacity(64 * 1024),
            udp_send_failed: 0,
            next_wait_reading: Instant::now(),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.udp
            .local_addr()
            .expect("a bound socket has an address")
    }

    /// The UDP socket, borrowed.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.udp.as_fd()
    }

    /// The endpoint: peers, frames and control messages in and out.
    pub fn endpoint(&self) -> &PeerEndpoint {
        &self.endpoint
    }

    pub fn endpoint_mut(&mut self) -> &mut PeerEndpoint {
        &mut self.endpoint
    }

    /// The endpoint's counters, and the socket's.
    pub fn counters(&self) -> TransportCounters {
        TransportCounters {
            udp_send_failed: self.udp_send_failed,
            recv_buffers_made: self.udp.buffers_made,
            ..self.endpoint.counters()
        }
    }

    /// One round of work: takes what arrived, drives the endpoint (see
    /// `PeerEndpoint::drive`) and sends what it wants sent. The frames that arrived are
    /// then the endpoint's `poll_frame`'s.
    pub fn poll(&mut self, flush: Flush) -> Polled {
        let now = Instant::now();
        let mut polled = Polled::default();
        for round in 0..RECV_ROUNDS {
            let endpoint = &mut self.endpoint;
            let (n, drained) = self.udp.recv(|meta, data| {
                let ecn = meta.ecn.map(|e| e as u8);
                endpoint.handle_datagram(now, meta.addr, meta.dst_ip, ecn, data);
            });
            polled.datagrams += n;
            if round == 0 && n > 0 && now >= self.next_wait_reading {
                self.read_socket_wait(now);
            }
            // A receive that did not fill its buffers emptied the socket: asking again
            // would only cost a system call (half of a receiving worker's, at 50 kpps).
            if drained {
                break;
            }
            // Every round filled its buffers: the socket may hold more.
            polled.more = round + 1 == RECV_ROUNDS;
        }
        self.endpoint.drive(now, flush);
        self.transmit(now);
        polled
    }

    /// Reads how long the first batch's datagrams waited in the socket, for the
    /// congestion controllers: the head of the queue shows how far behind this node is.
    fn read_socket_wait(&mut self, now: Instant) {
        self.next_wait_reading = now + WAIT_READING_INTERVAL;
        if let Some(wait) = self.udp.last_datagram_wait() {
            self.endpoint.set_socket_wait(wait);
        }
    }

    /// How long the owner may sleep before `poll` is due with nothing arriving.
    pub fn timeout(&mut self) -> Option<std::time::Duration> {
        let at = self.endpoint.poll_timeout()?;
        Some(at.saturating_duration_since(Instant::now()))
    }

    fn transmit(&mut self, now: Instant) {
        let segments = self.udp.max_gso_segments();
        let mut buf = std::mem::take(&mut self.transmit_buf);
        while let Some(transmit) = self.endpoint.poll_transmit(now, segments, &mut buf) {
            self.send(&transmit, &buf);
        }
        self.transmit_buf = buf;
    }

    fn send(&mut self, transmit: &Transmit, buf: &[u8]) {
        let sent = self.udp.send(&quinn_udp::Transmit {
            destination: transmit.destination,
            ecn: transmit.ecn.and_then(quinn_udp::EcnCodepoint::from_bits),
            contents: &buf[..transmit.size],
            segment_size: transmit.segment_size,
            src_ip: transmit.src_ip,
        });
        if let Err(e) = sent {
            let packets = transmit.datagrams();
            self.udp_send_failed += packets as u64;
            tracing::trace!(error = %e, packets, "UDP send failed");
        }
    }

    /// Closes every connection, telling the peers.
    pub fn close(&mut self) {
        let now = Instant::now();
        self.endpoint.close_all(now);
        self.transmit(now);
    }
}

/// The switch's view of QUIC: everything it asks goes to the endpoint or the socket.
impl crate::remote_transport::RemoteTransport for PeerTransport {
    fn local_addr(&self) -> SocketAddr {
        PeerTransport::local_addr(self)
    }

    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        PeerTransport::as_fd(self)
    }

    fn send_frame(
        &mut self,
        now: Instant,
        peer: PeerId,
        wire: WireId,
        frame: &[u8],
        carrier: Option<Carrier>,
    ) -> Result<(), NotSent> {
        self.endpoint.send_frame(now, peer, wire, frame, carrier)
    }

    fn poll(&mut self, flush: Flush) -> Polled {
        PeerTransport::poll(self, flush)
    }

    fn next_frame(&mut self) -> Option<ReceivedFrame<'_>> {
        self.endpoint.poll_frame()
    }

    fn count_unknown_link(&mut self) {
        self.endpoint.count_unknown_link();
    }

    fn timeout(&mut self) -> Option<Duration> {
        PeerTransport::timeout(self)
    }

    fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
        now: Instant,
    ) -> Result<PeerId, PeerError> {
        self.endpoint.add_peer(name, addr, carrier, now)
    }

    fn retire_peer(&mut self, peer: PeerId, now: Instant) -> bool {
        self.endpoint.retire_peer(peer, now)
    }

    fn send_control(&mut self, now: Instant, peer: PeerId, message: &ControlMessage) -> bool {
        self.endpoint.send_control(now, peer, message)
    }

    fn counters(&self) -> TransportCounters {
        PeerTransport::counters(self)
    }

    fn peer_stats(&mut self) -> Vec<crate::stats::PeerStats> {
        self.endpoint.peer_stats()
    }

    fn take_events(&mut self) -> Vec<PeerEvent> {
        self.endpoint.take_events()
    }

    fn close(&mut self) {
        PeerTransport::close(self)
    }
}
