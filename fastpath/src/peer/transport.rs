//! The QUIC endpoint of one node: its UDP socket, quinn-proto's endpoint and one session
//! per peer connection, driven by `poll` from the owner's loop (I/O at this edge only).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{
    ClientConfig, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig, Event, ServerConfig,
    StreamEvent,
};
use rustls::pki_types::ServerName;
use xwire_proto::control::ControlMessage;

use super::session::{Inbound, Session};
use super::udp::Udp;
use super::{tls, Carrier, PeerConfig, PeerCounters, PeerError, PeerEvent, PeerId};
use xwire_pki::NodeIdentity;

mod lifecycle;

use lifecycle::{CLOSE_KNOCK_HEARD, CLOSE_OVERFLOW};

/// The QUIC application close code for a connection closed on purpose (others are in
/// `lifecycle`).
const CLOSE_SHUTDOWN: u32 = 3;

/// The longest a frame waits for more to share its datagram (or stream write) while the
/// caller says more frames are coming.
const MAX_HOLD: Duration = Duration::from_micros(50);

/// When `PeerTransport::poll` sends the frames queued by `send_frame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Now: nothing more is coming soon (the caller's ports were empty this pass).
    Now,
    /// Once full, or after waiting `MAX_HOLD`: the caller is busy, and more frames will
    /// share the datagram. Under load this turns one packet per pass into full packets.
    WhenDue,
}

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Events the control plane has not taken yet: past this, control messages are dropped
/// (and their connection closed), so that a peer cannot grow this node's memory.
const MAX_EVENTS: usize = 1 << 16;
/// Connections in their handshake at once. A peer has at most a dial and a knock in
/// flight; anything beyond this is someone else's doing.
const MAX_HANDSHAKES: usize = 64;
/// How often a refused handshake is logged (with the count since the last line).
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// IPv4 and UDP headers: what QUIC's packets leave of the underlay MTU.
const IP_UDP_OVERHEAD: u16 = 28;
/// The UDP payload one GSO send may carry (the IP length field's limit, less headers).
const MAX_GSO_BYTES: usize = 65_535 - 28;

struct Peer {
    name: String,
    addr: Option<SocketAddr>,
    carrier: Carrier,
    /// This node dials (its name sorts first) and redials after a loss.
    dials: bool,
    session: Option<ConnectionHandle>,
    next_dial: Instant,
    backoff: Duration,
    /// A knock is owed: this node does not dial the peer, but has just (re)started, and the
    /// peer would otherwise learn of it only when its old connection next sends (after a
    /// loss-recovery timeout that backs off to hundreds of milliseconds).
    knock: bool,
}

pub struct PeerTransport {
    name: String,
    versions: std::ops::RangeInclusive<u16>,
    udp: Udp,
    endpoint: Endpoint,
    client: ClientConfig,
    server: Arc<ServerConfig>,
    peers: Vec<Peer>,
    sessions: HashMap<ConnectionHandle, Session>,
    /// Scratch list of the sessions driven in one `poll`.
    handles: Vec<ConnectionHandle>,
    counters: PeerCounters,
    events: Vec<PeerEvent>,
    transmit_buf: Vec<u8>,
    /// Handshakes refused since the last log line about them, and when that was.
    refusals: (u64, Option<Instant>),
}

impl PeerTransport {
    /// Binds the UDP socket (in the calling thread's network namespace).
    pub fn bind(config: PeerConfig) -> Result<PeerTransport, PeerError> {
        let mtu = config.underlay_mtu.saturating_sub(IP_UDP_OVERHEAD);
        let server = tls::server_config(&config.identity, mtu)?;
        let client = tls::client_config(&config.identity, mtu)?;
        let udp = Udp::bind(config.listen)?;
        // The stateless-reset key is derived from the node's private key, so that it is
        // the same after a restart: a node that restarts answers its peers' packets for
        // the old connection with a reset they accept, and they redial at once instead
        // of waiting out the idle timeout.
        // The connection-id key must be stable too: the endpoint answers with a reset
        // only packets whose connection id it recognizes as one it could have issued.
        let mut endpoint_config = EndpointConfig::new(Arc::new(reset_key(&config.identity)));
        let cid_key = cid_key(&config.identity);
        endpoint_config.cid_generator(move || {
            Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
        });
        // The largest packet this node accepts, announced to peers; quinn's default is
        // for a 1500-byte path and would cap a jumbo underlay at 1472.
        endpoint_config
            .max_udp_payload_size(mtu.max(1200))
            .map_err(|e| {
                PeerError::Identity(format!("underlay MTU {}: {e}", config.underlay_mtu))
            })?;
        let endpoint = Endpoint::new(Arc::new(endpoint_config), Some(server.clone()), true, None);
        Ok(PeerTransport {
            name: config.identity.node_name.clone(),
            versions: config.versions.clone(),
            udp,
            endpoint,
            client,
            server,
            peers: Vec::new(),
            sessions: HashMap::new(),
            handles: Vec::new(),
            counters: PeerCounters::default(),
            events: Vec::new(),
            transmit_buf: Vec::with_capacity(64 * 1024),
            refusals: (0, None),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.udp
            .local_addr()
            .expect("a bound socket has an address")
    }

    /// The UDP socket, for a caller that sleeps until something arrives on it.
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.udp.raw_fd()
    }

    pub fn counters(&self) -> PeerCounters {
        self.counters
    }

    /// Declares a peer node at `addr`; frames to it travel on `carrier`. Declaring a
    /// known name again updates its address and carrier.
    pub fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
    ) -> Result<PeerId, PeerError> {
        ServerName::try_from(name.to_owned()).map_err(|_| PeerError::BadName(name.into()))?;
        let index = self.peer_index(name);
        let peer = &mut self.peers[index];
        peer.addr = Some(addr);
        peer.carrier = carrier;
        peer.dials = self.name.as_str() < name;
        peer.knock = !peer.dials && peer.session.is_none();
        Ok(PeerId(index as u32))
    }

    /// The peer named `name`, creating an entry (not dialed) when there is none.
    fn peer_index(&mut self, name: &str) -> usize {
        if let Some(i) = self.peers.iter().position(|p| p.name == name) {
            return i;
        }
        self.peers.push(Peer {
            name: name.to_owned(),
            addr: None,
            carrier: Carrier::Datagram,
            dials: false,
            session: None,
            next_dial: Instant::now(),
            backoff: MIN_BACKOFF,
            knock: false,
        });
        self.peers.len() - 1
    }

    pub fn peer_name(&self, peer: PeerId) -> Option<&str> {
        self.peers.get(peer.0 as usize).map(|p| p.name.as_str())
    }

    /// Whether Hello has been exchanged with the peer.
    pub fn is_up(&self, peer: PeerId) -> bool {
        self.live_session(peer).is_some()
    }

    fn live_session(&self, peer: PeerId) -> Option<ConnectionHandle> {
        let handle = self.peers.get(peer.0 as usize)?.session?;
        self.sessions
            .get(&handle)
            .filter(|s| s.hello_done)
            .map(|_| handle)
    }

    /// Queues one frame for the peer (it leaves on the next `poll`) on the peer's
    /// carrier. False when dropped: the peer is not up, or its carrier has no room.
    pub fn send_frame(&mut self, peer: PeerId, link_uid: u64, frame: &[u8]) -> bool {
        self.send_frame_on(peer, link_uid, frame, None)
    }

    /// As `send_frame`, on `carrier` (a link's own) or, with `None`, the peer's.
    pub fn send_frame_on(
        &mut self,
        peer: PeerId,
        link_uid: u64,
        frame: &[u8],
        carrier: Option<Carrier>,
    ) -> bool {
        let Some(handle) = self.live_session(peer) else {
            self.counters.dropped_no_peer += 1;
            return false;
        };
        let carrier = carrier.unwrap_or(self.peers[peer.0 as usize].carrier);
        let session = self.sessions.get_mut(&handle).expect("live session");
        let sent = session.send_frame(carrier, link_uid, frame, &mut self.counters, Instant::now);
        if sent {
            self.counters.frames_sent += 1;
        }
        sent
    }

    /// Sends a control message to a peer that is up. False when it is not, or when it
    /// has left so much unread that its connection is closed instead.
    pub fn send_control(&mut self, peer: PeerId, message: &ControlMessage) -> bool {
        let Some(handle) = self.live_session(peer) else {
            return false;
        };
        let session = self.sessions.get_mut(&handle).expect("live session");
        send_or_close(session, message, &mut self.counters, Instant::now())
    }

    /// Streams whose state the sessions hold (read in part, or waiting for Hello).
    pub fn streams_held(&self) -> usize {
        self.sessions.values().map(Session::streams_held).sum()
    }

    /// Queues an event for the control plane; false (and counted, for a control
    /// message) when the queue is full.
    fn push_event(&mut self, event: PeerEvent) -> bool {
        if self.events.len() >= MAX_EVENTS {
            if matches!(event, PeerEvent::Control { .. }) {
                self.counters.control_dropped += 1;
            }
            return false;
        }
        self.events.push(event);
        true
    }

    /// Events since the last call.
    pub fn take_events(&mut self) -> Vec<PeerEvent> {
        std::mem::take(&mut self.events)
    }

    /// One round of work: send what was queued (all of it, or with `Flush::WhenDue` only
    /// what has waited `MAX_HOLD`), take what arrived (frames go to
    /// `on_frame(peer, link_uid, frame)`, which says whether it knew the link), run timers,
    /// dial. Returns how many UDP datagrams arrived.
    pub fn poll(
        &mut self,
        flush: Flush,
        on_frame: &mut dyn FnMut(PeerId, u64, &[u8]) -> bool,
    ) -> usize {
        let now = Instant::now();
        for session in self.sessions.values_mut() {
            let due = match (flush, session.held_since()) {
                (_, None) => false,
                (Flush::Now, Some(_)) => true,
                (Flush::WhenDue, Some(since)) => now.duration_since(since) >= MAX_HOLD,
            };
            if due {
                session.flush(&mut self.counters);
            }
        }
        let received = self.receive(now);
        self.dial(now);
        // Reused: this runs on every pass of the worker.
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        handles.extend(self.sessions.keys().copied());
        for &handle in &handles {
            self.drive(handle, now, on_frame);
        }
        self.handles = handles;
        received
    }

    fn receive(&mut self, now: Instant) -> usize {
        let mut total = 0;
        // A few batches per round, so that sending gets its turn under load.
        for _ in 0..4 {
            let mut arrived = Vec::new();
            let n = self.udp.recv(|meta, data| {
                arrived.push((meta.addr, meta.dst_ip, meta.ecn, BytesMut::from(data)));
            });
            total += n;
            for (remote, local_ip, ecn, data) in arrived {
                let ecn = ecn.and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8));
                let mut response = Vec::new();
                match self
                    .endpoint
                    .handle(now, remote, local_ip, ecn, data, &mut response)
                {
                    Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                        if let Some(session) = self.sessions.get_mut(&handle) {
                            session.conn.handle_event(event);
                        }
                    }
                    Some(DatagramEvent::NewConnection(incoming)) => {
                        if let Some(why) = self.refuse_handshake(remote) {
                            self.endpoint.ignore(incoming);
                            self.counters.handshakes_refused += 1;
                            self.log_refusal(remote, why, now);
                            continue;
                        }
                        match self.endpoint.accept(
                            incoming,
                            now,
                            &mut response,
                            Some(self.server.clone()),
                        ) {
                            Ok((handle, conn)) => {
                                self.sessions.insert(handle, Session::new(conn, None));
                            }
                            Err(e) => {
                                if let Some(transmit) = e.response {
                                    self.send_raw(&transmit, &response);
                                }
                            }
                        }
                    }
                    Some(DatagramEvent::Response(transmit)) => self.send_raw(&transmit, &response),
                    None => {}
                }
            }
            if n == 0 {
                break;
            }
        }
        total
    }

    /// Why a handshake from `remote` is not begun at all, if it is not: only the
    /// configured peers' addresses may connect (no state, and no answer, for anyone
    /// else), and only so many at once.
    fn refuse_handshake(&self, remote: SocketAddr) -> Option<&'static str> {
        if !self
            .peers
            .iter()
            .any(|p| p.addr.is_some_and(|a| a.ip() == remote.ip()))
        {
            return Some("not a peer's address");
        }
        let handshaking = self
            .sessions
            .values()
            .filter(|s| s.conn.is_handshaking())
            .count();
        (handshaking >= MAX_HANDSHAKES).then_some("too many handshakes in progress")
    }

    /// Logs refused handshakes at most once per `REFUSAL_LOG_EVERY`, with their count.
    fn log_refusal(&mut self, remote: SocketAddr, why: &str, now: Instant) {
        self.refusals.0 += 1;
        if self
            .refusals
            .1
            .is_some_and(|last| now.duration_since(last) < REFUSAL_LOG_EVERY)
        {
            return;
        }
        tracing::warn!(%remote, reason = why, refused = self.refusals.0, "peer handshake refused");
        self.refusals = (0, Some(now));
    }

    fn send_raw(&mut self, transmit: &quinn_proto::Transmit, buf: &[u8]) {
        let sent = self.udp.send(&quinn_udp::Transmit {
            destination: transmit.destination,
            ecn: transmit
                .ecn
                .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
            contents: &buf[..transmit.size],
            segment_size: transmit.segment_size,
            src_ip: transmit.src_ip,
        });
        if let Err(e) = sent {
            let packets = transmit
                .segment_size
                .map_or(1, |size| transmit.size.div_ceil(size.max(1)));
            self.counters.udp_send_failed += packets as u64;
            tracing::trace!(error = %e, packets, "UDP send failed");
        }
    }

    /// Everything one connection has to do this round.
    fn drive(
        &mut self,
        handle: ConnectionHandle,
        now: Instant,
        on_frame: &mut dyn FnMut(PeerId, u64, &[u8]) -> bool,
    ) {
        let Some(mut session) = self.sessions.remove(&handle) else {
            return;
        };
        if session.conn.poll_timeout().is_some_and(|t| t <= now) {
            session.conn.handle_timeout(now);
        }
        let mut inbound = Vec::new();
        while let Some(event) = session.conn.poll() {
            match event {
                // A knock is moot once the peer has connected.
                Event::Connected
                    if session.knock
                        && session
                            .peer
                            .is_some_and(|p| self.peers[p].session.is_some()) =>
                {
                    session
                        .conn
                        .close(now, CLOSE_KNOCK_HEARD.into(), "connected".into());
                }
                // The dialing side speaks first.
                Event::Connected if session.peer.is_some() => session.send_hello(self.hello()),
                Event::ConnectionLost { reason } => self.lost(handle, &session, reason.to_string()),
                Event::Stream(StreamEvent::Opened { .. }) => {
                    for id in session.accept_streams() {
                        self.read(&mut session, id, on_frame, &mut inbound);
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    self.read(&mut session, id, on_frame, &mut inbound);
                }
                Event::Stream(StreamEvent::Writable { .. }) => session.flush_streams(),
                Event::DatagramReceived => {
                    let peer = session.peer.map(|p| PeerId(p as u32));
                    match peer.filter(|_| session.hello_done) {
                        Some(peer) => session.read_datagrams(&mut self.counters, &mut |uid, f| {
                            on_frame(peer, uid, f)
                        }),
                        // Nothing crosses before Hello.
                        None => session.read_datagrams(&mut self.counters, &mut |_, _| false),
                    }
                }
                _ => {}
            }
        }
        let before = session.hello_done;
        for message in inbound {
            self.on_inbound(handle, &mut session, message, now);
        }
        if session.hello_done && !before {
            // What waited for Hello is read now.
            let mut inbound = Vec::new();
            for id in session.take_deferred() {
                self.read(&mut session, id, on_frame, &mut inbound);
            }
            for message in inbound {
                self.on_inbound(handle, &mut session, message, now);
            }
        }
        while let Some(event) = session.conn.poll_endpoint_events() {
            if let Some(reply) = self.endpoint.handle_event(handle, event) {
                session.conn.handle_event(reply);
            }
        }
        self.transmit(&mut session, now);
        if session.conn.is_drained() {
            if let Some(peer) = session.peer {
                if self.peers[peer].session == Some(handle) {
                    self.peers[peer].session = None;
                }
            }
            return;
        }
        self.sessions.insert(handle, session);
    }

    fn read(
        &mut self,
        session: &mut Session,
        id: quinn_proto::StreamId,
        on_frame: &mut dyn FnMut(PeerId, u64, &[u8]) -> bool,
        inbound: &mut Vec<Inbound>,
    ) {
        let peer = session
            .peer
            .filter(|_| session.hello_done)
            .map(|p| PeerId(p as u32));
        let mut deliver = |uid: u64, frame: &[u8]| match peer {
            Some(peer) => on_frame(peer, uid, frame),
            None => false,
        };
        session.read_stream(id, &mut self.counters, &mut deliver, inbound);
    }

    fn transmit(&mut self, session: &mut Session, now: Instant) {
        // One GSO send carries at most 64 KiB of UDP payload; quinn-proto fills as many
        // segments as it is allowed, so allow only what fits at this path's MTU (with
        // jumbo frames, fewer than the socket's segment limit).
        let mtu = usize::from(session.conn.current_mtu()).max(1200);
        let segments = self.udp.max_gso_segments().min(MAX_GSO_BYTES / mtu).max(1);
        loop {
            self.transmit_buf.clear();
            let Some(transmit) = session
                .conn
                .poll_transmit(now, segments, &mut self.transmit_buf)
            else {
                break;
            };
            let buf = std::mem::take(&mut self.transmit_buf);
            self.send_raw(&transmit, &buf);
            self.transmit_buf = buf;
        }
    }

    /// Closes every connection, telling the peers.
    pub fn close(&mut self) {
        let now = Instant::now();
        let handles: Vec<_> = self.sessions.keys().copied().collect();
        for handle in handles {
            let mut session = self.sessions.remove(&handle).expect("listed");
            session
                .conn
                .close(now, CLOSE_SHUTDOWN.into(), "shutdown".into());
            self.transmit(&mut session, now);
        }
    }
}

/// Queues `message` on the session's control stream; when the peer has left too much
/// unread, counts the message as dropped and closes the connection instead (the next
/// connection's Sync makes good what was lost). Says whether it was queued.
fn send_or_close(
    session: &mut Session,
    message: &ControlMessage,
    counters: &mut PeerCounters,
    now: Instant,
) -> bool {
    if session.send_control(message) {
        return true;
    }
    counters.control_dropped += 1;
    session.conn.close(
        now,
        CLOSE_OVERFLOW.into(),
        "the peer does not read its control stream".into(),
    );
    false
}

/// An HMAC key for stateless-reset tokens that only this node's private key yields.
fn reset_key(identity: &NodeIdentity) -> ring::hmac::Key {
    let secret = derived(identity, "stateless reset");
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_ref())
}

/// The key of the hash that marks this node's connection ids as its own.
fn cid_key(identity: &NodeIdentity) -> u64 {
    let secret = derived(identity, "connection ids");
    let mut first = [0u8; 8];
    first.copy_from_slice(&secret.as_ref()[..8]);
    u64::from_le_bytes(first)
}

fn derived(identity: &NodeIdentity, purpose: &str) -> ring::digest::Digest {
    ring::digest::digest(
        &ring::digest::SHA256,
        format!("xwire {purpose}\n{}", identity.key_pem).as_bytes(),
    )
}
