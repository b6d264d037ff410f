//! The QUIC side of one node, with no socket and no clock, in the manner of quinn-proto:
//! it is fed UDP datagrams and the switch's frames with the time, and polled for UDP
//! transmits, received frames, events for the control plane and its next timeout. The
//! socket and the clock are the driver's (`transport.rs`), so that all of it can be
//! tested in memory.
//!
//! Longer than most files here, for a reason: it is one state machine (the peers' states
//! are in `state.rs`, Hello's verdict in `hello.rs`), and split by size its transitions
//! would be read in two places.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{
    ClientConfig, ConnectionError, ConnectionHandle, DatagramEvent, EndpointConfig, Event,
    ServerConfig, StreamEvent, TransportErrorCode,
};
use rustls::pki_types::ServerName;
use xwire_proto::control::{
    Capabilities, ControlBody, ControlMessage, ErrorBody, ErrorCode, Hello,
};
use xwire_proto::{DecodeError, WireId};

use super::congestion::OwnQueue;
use super::hello::{self, Opened, Verdict, CLOSE_PROTOCOL};
use super::inbox::{Inbox, ReceivedFrame};
use super::refusals::{Refusal, Refusals};
use super::session::{Delivery, Inbound, Session};
use super::state::{Due, Ended, Peer};
use super::transmit::{Flush, Transmit, MAX_HOLD};
use super::{tls, Carrier, PeerConfig, PeerError, PeerEvent, PeerId, TransportCounters};

/// QUIC application close codes (the refusals' are in `hello`).
const CLOSE_SHUTDOWN: u32 = 3;
/// A knock was heard: the node that dials is dialing now.
const CLOSE_KNOCK_HEARD: u32 = 4;
/// A queue for this peer overflowed (it does not read, or sends faster than the control
/// plane takes its messages): the next connection's Sync makes good what was lost.
const CLOSE_OVERFLOW: u32 = 5;
/// Why a connection ended when its peer knocked (it restarted).
const KNOCK_REASON: &str = "the peer restarted (it knocked)";

/// Events the control plane has not taken yet: past this, control messages are dropped
/// (and their connection closed), so that a peer cannot grow this node's memory.
const MAX_EVENTS: usize = 1 << 16;
/// Bytes of control records (as they came) whose messages the control plane has not
/// taken yet: past this, the control streams are not read (QUIC's flow control then
/// holds the peer), so a peer cannot make this node decode and hold more than this and
/// the one record under way. A Sync comes in parts of at most `MAX_SYNC_PART`.
pub(crate) const MAX_HELD_CONTROL: usize = 2 << 20;
/// Handshakes that other nodes began, in progress at once. A peer has at most a dial and
/// a knock in flight; anything beyond this is someone else's doing. Past it, a configured
/// peer's address with none in progress still gets one (`refuse_handshake`).
const MAX_HANDSHAKES: usize = 64;
/// Handshakes in progress from one address past which a new one is begun only once the
/// client has answered a Retry (proved that it receives at the address it sends from):
/// an honest peer has a dial and a knock at most, and a flood of Initials with a peer's
/// address forged costs no state at all.
const UNVALIDATED_PER_ADDRESS: usize = 2;
/// Handshakes in progress from one address, validated or not: one address (a peer
/// gone wrong, or the underlay forging it) cannot take every slot from the others.
const MAX_HANDSHAKES_PER_ADDRESS: usize = 8;
/// IPv4 and UDP headers: what QUIC's packets leave of the underlay MTU.
const IP_UDP_OVERHEAD: u16 = 28;
/// The UDP payload one GSO send may carry (the IP length field's limit, less headers).
const MAX_GSO_BYTES: usize = 65_535 - 28;

/// Why a frame handed to a peer did not leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// The peer's connection is not up.
    NotConnected,
    /// The connection is up but its carrier has no room: QUIC's DATAGRAM send buffer,
    /// or the stream's flow-control window, is full (the wire is offered more than it
    /// carries).
    CarrierFull,
}

pub struct PeerEndpoint {
    name: String,
    versions: RangeInclusive<u16>,
    quic: quinn_proto::Endpoint,
    client: ClientConfig,
    server: Arc<ServerConfig>,
    peers: Vec<Peer>,
    /// Boxed: `drive` takes each session out and puts it back on every pass, and a
    /// quinn connection is kilobytes to copy (a fifth of a worker's time at 50 kpps).
    sessions: HashMap<ConnectionHandle, Box<Session>>,
    /// The sessions of the last `drive`, in the order `poll_transmit` serves them, and
    /// how far it has got.
    order: Vec<ConnectionHandle>,
    next_to_transmit: usize,
    /// Answers of the endpoint itself (stateless resets, refusals) not yet polled.
    responses: VecDeque<(Transmit, Vec<u8>)>,
    counters: TransportCounters,
    /// With the bytes of the record a control message came in (0 for other events).
    events: VecDeque<(PeerEvent, usize)>,
    /// The sum of `events`' record bytes.
    held_control: usize,
    inbox: Inbox,
    /// Which refused handshakes are warned of.
    refusals: Refusals,
    /// How long datagrams wait in the socket before they are handled: every
    /// connection's congestion controller reads it.
    own_queue: Arc<OwnQueue>,
}

impl PeerEndpoint {
    /// An endpoint for `config`'s identity and versions (its `listen` address is the
    /// driver's business).
    pub fn new(config: &PeerConfig) -> Result<PeerEndpoint, PeerError> {
        let mtu = config.underlay_mtu.saturating_sub(IP_UDP_OVERHEAD);
        let own_queue = Arc::new(OwnQueue::default());
        let server = tls::server_config(&config.identity, mtu, &own_queue)?;
        let client = tls::client_config(&config.identity, mtu, &own_queue)?;
        // The stateless-reset key is derived from the node's private key, so that it is
        // the same after a restart: a node that restarts answers its peers' packets for
        // the old connection with a reset they accept, and they redial at once instead
        // of waiting out the idle timeout.
        // The connection-id key must be stable too: the endpoint answers with a reset
        // only packets whose connection id it recognizes as one it could have issued.
        let mut endpoint_config = EndpointConfig::new(Arc::new(tls::reset_key(&config.identity)));
        let cid_key = tls::cid_key(&config.identity);
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
        let quic =
            quinn_proto::Endpoint::new(Arc::new(endpoint_config), Some(server.clone()), true, None);
        Ok(PeerEndpoint {
            name: config.identity.node_name.clone(),
            versions: config.versions.clone(),
            quic,
            client,
            server,
            peers: Vec::new(),
            sessions: HashMap::new(),
            order: Vec::new(),
            next_to_transmit: 0,
            responses: VecDeque::new(),
            counters: TransportCounters::default(),
            events: VecDeque::new(),
            held_control: 0,
            inbox: Inbox::default(),
            refusals: Refusals::default(),
            own_queue,
        })
    }

    /// Tells the connections' congestion controllers how long datagrams now wait in the
    /// socket before they reach `handle_datagram` (the driver measures it).
    pub(crate) fn set_socket_wait(&self, wait: Duration) {
        self.own_queue.set_wait(wait);
    }

    pub fn counters(&self) -> TransportCounters {
        self.counters
    }

    /// Each declared peer's connection statistics (zeros for one that is not up).
    pub fn peer_stats(&mut self) -> Vec<crate::stats::PeerStats> {
        (0..self.peers.len())
            .map(|index| {
                let peer = &self.peers[index];
                let mut stats = crate::stats::PeerStats {
                    name: peer.name.clone(),
                    ..Default::default()
                };
                let live = self.live_session(PeerId(index as u32));
                if let Some(session) = live.and_then(|handle| self.sessions.get_mut(&handle)) {
                    let quic = session.conn.stats();
                    stats.up = true;
                    stats.rtt = Some(quic.path.rtt);
                    stats.udp_datagrams_sent = quic.udp_tx.datagrams;
                    stats.udp_bytes_sent = quic.udp_tx.bytes;
                    stats.udp_datagrams_received = quic.udp_rx.datagrams;
                    stats.udp_bytes_received = quic.udp_rx.bytes;
                    stats.lost_packets = quic.path.lost_packets;
                    stats.congestion_window = quic.path.cwnd;
                    stats.congestion_events = quic.path.congestion_events;
                    stats.datagram_frames_sent = quic.frame_tx.datagram;
                    stats.datagram_frames_received = quic.frame_rx.datagram;
                }
                stats
            })
            .collect()
    }

    /// Declares a peer node at `addr`; frames to it travel on `carrier`. Declaring a
    /// known name again updates its address and carrier.
    pub fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
        now: Instant,
    ) -> Result<PeerId, PeerError> {
        ServerName::try_from(name.to_owned()).map_err(|_| PeerError::BadName(name.into()))?;
        if let Some(index) = self.peers.iter().position(|p| p.name == name) {
            self.peers[index].redeclare(addr, carrier, now);
            return Ok(PeerId(index as u32));
        }
        self.peers
            .push(Peer::new(&self.name, name, addr, carrier, now));
        Ok(PeerId(self.peers.len() as u32 - 1))
    }

    /// The peer node left: its connection is closed (a `Down` follows if it was up) and
    /// it is neither dialed nor knocked until `add_peer` declares it again.
    pub fn retire_peer(&mut self, peer: PeerId, now: Instant) -> bool {
        let Some(state) = self.peers.get_mut(peer.0 as usize) else {
            return false;
        };
        state.retired = true;
        if let Some(handle) = state.connection() {
            if let Some(mut session) = self.sessions.remove(&handle) {
                self.close(
                    handle,
                    &mut session,
                    CLOSE_SHUTDOWN,
                    "the node left".into(),
                    now,
                );
                self.sessions.insert(handle, session);
            }
        }
        true
    }

    /// Whether Hello has been exchanged with the peer.
    pub fn is_up(&self, peer: PeerId) -> bool {
        self.live_session(peer).is_some()
    }

    fn live_session(&self, peer: PeerId) -> Option<ConnectionHandle> {
        let (conn, _) = self.peers.get(peer.0 as usize)?.up()?;
        self.sessions.contains_key(&conn).then_some(conn)
    }

    /// Queues one frame for the peer on `carrier` (a link's own) or, with `None`, the
    /// peer's; it leaves when `drive` flushes. Dropped (and counted in the peer's
    /// counters) when the peer is not up, or when its carrier has no room.
    pub fn send_frame(
        &mut self,
        now: Instant,
        peer: PeerId,
        wire: WireId,
        frame: &[u8],
        carrier: Option<Carrier>,
    ) -> Result<(), NotSent> {
        let Some(conn) = self.peers.get(peer.0 as usize).and_then(Peer::up) else {
            self.counters.dropped_no_peer += 1;
            return Err(NotSent::NotConnected);
        };
        let Some(session) = self.sessions.get_mut(&conn.0) else {
            self.counters.dropped_no_peer += 1;
            return Err(NotSent::NotConnected);
        };
        let carrier = carrier.unwrap_or(self.peers[peer.0 as usize].carrier);
        if !session.send_frame(carrier, wire, frame, &mut self.counters, now) {
            return Err(NotSent::CarrierFull);
        }
        self.counters.frames_sent += 1;
        Ok(())
    }

    /// Sends a control message to a peer that is up. False when it is not, or when it
    /// has left so much unread that its connection is closed instead.
    pub fn send_control(&mut self, now: Instant, peer: PeerId, message: &ControlMessage) -> bool {
        let Some(handle) = self.live_session(peer) else {
            return false;
        };
        let mut session = self.sessions.remove(&handle).expect("live session");
        let sent = self.send_or_close(handle, &mut session, message, now);
        self.sessions.insert(handle, session);
        sent
    }

    /// Streams whose state the sessions hold (read in part, or waiting for Hello).
    pub fn streams_held(&self) -> usize {
        self.sessions.values().map(|s| s.streams_held()).sum()
    }

    /// The next event for the control plane.
    pub fn poll_event(&mut self) -> Option<PeerEvent> {
        let (event, bytes) = self.events.pop_front()?;
        self.held_control -= bytes;
        Some(event)
    }

    /// Every event not yet polled.
    pub fn take_events(&mut self) -> Vec<PeerEvent> {
        self.held_control = 0;
        self.events.drain(..).map(|(event, _)| event).collect()
    }

    /// The next frame received from a peer. Its bytes stay valid until the next call
    /// that takes `&mut self`.
    pub fn poll_frame(&mut self) -> Option<ReceivedFrame<'_>> {
        self.inbox.next()
    }

    /// The frame polled last was for a link the caller does not know.
    pub fn count_unknown_link(&mut self) {
        self.counters.dropped_unknown_link += 1;
    }

    /// Queues an event for the control plane; false (and counted, for a control
    /// message) when the queue is full.
    fn push_event(&mut self, event: PeerEvent) -> bool {
        self.push_event_of(event, 0)
    }

    /// As `push_event`, for a control message that came in a record of `bytes`.
    fn push_event_of(&mut self, event: PeerEvent, bytes: usize) -> bool {
        if self.events.len() >= MAX_EVENTS {
            if matches!(event, PeerEvent::Control { .. }) {
                self.counters.control_dropped += 1;
            }
            return false;
        }
        self.held_control += bytes;
        self.events.push_back((event, bytes));
        true
    }

    /// Bytes of control records the sessions may still decode before the control plane
    /// takes what it has.
    fn control_room(&self) -> usize {
        MAX_HELD_CONTROL.saturating_sub(self.held_control)
    }

    /// The latest moment by which `drive` should run again, with nothing arriving.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let held = self
            .sessions
            .values()
            .filter_map(|s| s.held_since())
            .map(|since| since + MAX_HOLD)
            .min();
        let connections = self
            .sessions
            .values_mut()
            .filter_map(|s| s.conn.poll_timeout())
            .min();
        let dials = self.peers.iter().filter_map(Peer::next_timeout).min();
        [held, connections, dials].into_iter().flatten().min()
    }

    /// Takes one UDP datagram from `remote` (sent to `local_ip`).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<u8>,
        data: BytesMut,
    ) {
        let ecn = ecn.and_then(quinn_proto::EcnCodepoint::from_bits);
        let mut response = Vec::new();
        match self
            .quic
            .handle(now, remote, local_ip, ecn, data, &mut response)
        {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(session) = self.sessions.get_mut(&handle) {
                    session.conn.handle_event(event);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if let Some(refusal) = self.refuse_handshake(remote) {
                    self.quic.ignore(incoming);
                    self.counters.handshakes_refused += 1;
                    self.log_refusal(remote, refusal, now);
                    return;
                }
                let from_there = self.handshakes_from(remote.ip());
                if !incoming.remote_address_validated() && from_there >= UNVALIDATED_PER_ADDRESS {
                    match self.quic.retry(incoming, &mut response) {
                        Ok(transmit) => {
                            self.counters.handshakes_retried += 1;
                            self.respond(&transmit, response);
                        }
                        // Not retriable (it carries a Retry's token already, which did not
                        // validate): dropped without state.
                        Err(e) => {
                            self.quic.ignore(e.into_incoming());
                            self.counters.handshakes_refused += 1;
                        }
                    }
                    return;
                }
                match self
                    .quic
                    .accept(incoming, now, &mut response, Some(self.server.clone()))
                {
                    Ok((handle, conn)) => {
                        self.sessions
                            .insert(handle, Box::new(Session::new(conn, None)));
                    }
                    Err(e) => {
                        if let Some(transmit) = e.response {
                            self.respond(&transmit, response);
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(transmit)) => self.respond(&transmit, response),
            None => {}
        }
    }

    fn respond(&mut self, transmit: &quinn_proto::Transmit, mut bytes: Vec<u8>) {
        bytes.truncate(transmit.size);
        self.responses
            .push_back((Transmit::from_quinn(transmit), bytes));
    }

    /// Why a handshake from `remote` is not begun at all, if it is not: only the
    /// configured peers' addresses may connect (no state, and no answer, for anyone
    /// else), and only so many at once.
    fn refuse_handshake(&self, remote: SocketAddr) -> Option<Refusal> {
        if !self.peers.iter().any(|p| p.addr.ip() == remote.ip()) {
            return Some(Refusal::NotAPeer);
        }
        let handshaking = self
            .sessions
            .values()
            .filter(|s| is_answering_handshake(s))
            .count();
        let from_there = self.handshakes_from(remote.ip());
        // Past the cap, a configured peer's address with no handshake under way still
        // gets one: each peer keeps a share of its own, so that other peers' addresses
        // (each within its own cap) cannot keep it out. At most `MAX_HANDSHAKES` plus one
        // per configured peer.
        if handshaking >= MAX_HANDSHAKES && from_there > 0 {
            return Some(Refusal::TooManyHandshakes);
        }
        (from_there >= MAX_HANDSHAKES_PER_ADDRESS).then_some(Refusal::TooManyFromAddress)
    }

    /// Whether the configured peer at `remote`'s address is up.
    fn peer_up_at(&self, remote: SocketAddr) -> bool {
        self.peers
            .iter()
            .any(|p| p.addr.ip() == remote.ip() && p.up().is_some())
    }

    /// Handshakes that others began with this node and that are in progress, from `ip`.
    fn handshakes_from(&self, ip: IpAddr) -> usize {
        self.sessions
            .values()
            .filter(|s| is_answering_handshake(s) && s.conn.remote_address().ip() == ip)
            .count()
    }

    /// Warns of a refused handshake when `Refusals` finds it worth it (at most once per
    /// 10 s, with the count since); otherwise logs it at debug.
    fn log_refusal(&mut self, remote: SocketAddr, refusal: Refusal, now: Instant) {
        let reason = refusal.reason();
        match self.refusals.note(remote.ip(), refusal, now) {
            Some(refused) => tracing::warn!(%remote, reason, refused, "peer handshake refused"),
            None => tracing::debug!(%remote, reason, "peer handshake refused"),
        }
    }

    /// One round of work at `now`: hands the queued frames to their connections (all, or
    /// with `Flush::WhenDue` those that waited `MAX_HOLD`), knocks and dials what is due,
    /// and runs every connection (its timers, what arrived). What it produced is polled
    /// after: `poll_transmit`, `poll_frame`, `poll_event`.
    pub fn drive(&mut self, now: Instant, flush: Flush) {
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
        self.dial(now);
        // Reused: this runs on every pass of the worker.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        order.extend(self.sessions.keys().copied());
        for &handle in &order {
            self.drive_one(handle, now);
        }
        self.order = order;
        self.next_to_transmit = 0;
    }

    /// The next UDP send, written into `buf`; `max_segments` is what one send of the
    /// driver's socket may carry (GSO).
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        max_segments: usize,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        buf.clear();
        if let Some((transmit, bytes)) = self.responses.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(transmit);
        }
        while let Some(handle) = self.order.get(self.next_to_transmit) {
            if let Some(session) = self.sessions.get_mut(handle) {
                // One GSO send carries at most 64 KiB of UDP payload; quinn-proto fills
                // as many segments as it is allowed, so allow only what fits at this
                // path's MTU (with jumbo frames, fewer than the socket's limit).
                let mtu = usize::from(session.conn.current_mtu()).max(1200);
                let segments = max_segments.min(MAX_GSO_BYTES / mtu).max(1);
                if let Some(transmit) = session.conn.poll_transmit(now, segments, buf) {
                    return Some(Transmit::from_quinn(&transmit));
                }
            }
            self.next_to_transmit += 1;
        }
        None
    }

    fn dial(&mut self, now: Instant) {
        for index in 0..self.peers.len() {
            let Some(due) = self.peers[index].due(now) else {
                continue;
            };
            let peer = &self.peers[index];
            let connected = self
                .quic
                .connect(now, self.client.clone(), peer.addr, &peer.name);
            let conn = match connected {
                Ok((handle, conn)) => {
                    let mut session = Box::new(Session::new(conn, Some(index)));
                    session.knock = due == Due::Knock;
                    self.sessions.insert(handle, session);
                    Some(handle)
                }
                Err(e) => {
                    tracing::warn!(peer = %peer.name, addr = %peer.addr, error = %e, ?due, "cannot connect");
                    None
                }
            };
            match due {
                Due::Knock => self.peers[index].knocked(conn),
                Due::Dial => {
                    self.counters.dials += u64::from(conn.is_some());
                    self.peers[index].dialed(conn, now);
                }
            }
        }
    }

    /// Everything one connection has to do this round.
    fn drive_one(&mut self, handle: ConnectionHandle, now: Instant) {
        let Some(mut session) = self.sessions.remove(&handle) else {
            return;
        };
        if session.conn.poll_timeout().is_some_and(|t| t <= now) {
            session.conn.handle_timeout(now);
        }
        let mut inbound = Vec::new();
        while let Some(event) = session.conn.poll() {
            match event {
                // A knock is moot once the peer is up: it has dialed.
                Event::Connected
                    if session.knock
                        && session.peer.is_some_and(|p| self.peers[p].up().is_some()) =>
                {
                    session
                        .conn
                        .close(now, CLOSE_KNOCK_HEARD.into(), "connected".into());
                }
                // The side that connected speaks first.
                Event::Connected if session.peer.is_some() => session.send_hello(self.hello()),
                Event::ConnectionLost { reason } => self.lost(handle, &session, &reason, now),
                Event::Stream(StreamEvent::Opened { .. }) => {
                    for id in session.accept_streams() {
                        self.read(&mut session, id, &mut inbound);
                    }
                }
                Event::Stream(StreamEvent::Readable { id }) => {
                    self.read(&mut session, id, &mut inbound);
                }
                Event::Stream(StreamEvent::Writable { .. }) => session.flush_streams(),
                Event::DatagramReceived => {
                    let mut to = Delivery {
                        inbox: &mut self.inbox,
                        peer: session_peer(&session),
                    };
                    session.read_datagrams(&mut self.counters, &mut to);
                }
                _ => {}
            }
        }
        let before = session.hello_done;
        for message in inbound {
            self.on_inbound(handle, &mut session, message, now);
        }
        // What waited for Hello, or for the control plane to take what was read before,
        // is read now.
        if session.hello_done && (!before || self.control_room() > 0) && session.has_deferred() {
            let mut inbound = Vec::new();
            for id in session.take_deferred() {
                self.read(&mut session, id, &mut inbound);
            }
            for message in inbound {
                self.on_inbound(handle, &mut session, message, now);
            }
        }
        while let Some(event) = session.conn.poll_endpoint_events() {
            if let Some(reply) = self.quic.handle_event(handle, event) {
                session.conn.handle_event(reply);
            }
        }
        if session.conn.is_drained() {
            // Every way a connection ends is seen before this; should one not be, the
            // peer must not stay tied to a connection that is gone.
            if let Some(peer) = session.peer {
                if self.peers[peer].ended(handle, now) == Ended::WasUp {
                    let reason = "the connection ended".to_owned();
                    self.push_event(PeerEvent::Down {
                        peer: PeerId(peer as u32),
                        reason,
                    });
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
        inbound: &mut Vec<Inbound>,
    ) {
        // Control streams only (data streams ignore it): what reads in this round decoded
        // becomes events only after it, so that room is spent already.
        let room = if id.dir() == quinn_proto::Dir::Bi {
            let decoded: usize = inbound
                .iter()
                .map(|i| match i {
                    Inbound::Control { bytes, .. } => *bytes,
                    _ => 0,
                })
                .sum();
            self.control_room().saturating_sub(decoded)
        } else {
            usize::MAX
        };
        let mut to = Delivery {
            inbox: &mut self.inbox,
            peer: session_peer(session),
        };
        session.read_stream(id, &mut self.counters, &mut to, inbound, room);
    }

    fn hello(&self) -> Hello {
        Hello {
            min_version: *self.versions.start(),
            max_version: *self.versions.end(),
            ..Hello::current(
                self.name.clone(),
                Capabilities::DATAGRAM.union(Capabilities::STREAM),
            )
        }
    }

    fn on_inbound(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        inbound: Inbound,
        now: Instant,
    ) {
        let (message, bytes) = match inbound {
            Inbound::Control { message, bytes } => (message, bytes),
            Inbound::Broken(e) => {
                self.refuse(
                    handle,
                    session,
                    now,
                    CLOSE_PROTOCOL,
                    format!("undecodable: {e}"),
                );
                return;
            }
            Inbound::Undecodable { request_id, error } if session.hello_done => {
                // Framing is intact: answer, skip, and keep the connection (a newer peer
                // may send what this build does not know).
                let code = match error {
                    DecodeError::UnknownControlType { .. } => ErrorCode::UNKNOWN_TYPE,
                    _ => ErrorCode::MALFORMED,
                };
                self.answer_error(handle, session, request_id, code, error.to_string(), now);
                return;
            }
            Inbound::Undecodable { error, .. } => {
                let reason = format!("its first message does not decode: {error}");
                self.refuse(handle, session, now, CLOSE_PROTOCOL, reason);
                return;
            }
        };
        let ControlBody::Hello(theirs) = &message.body else {
            match session_peer(session) {
                Some(peer) => {
                    if !self.push_event_of(PeerEvent::Control { peer, message }, bytes) {
                        let reason = "control messages arrive faster than they are handled";
                        self.close(handle, session, CLOSE_OVERFLOW, reason.into(), now);
                    }
                }
                None => {
                    let reason = "a control message before Hello".to_owned();
                    self.refuse(handle, session, now, CLOSE_PROTOCOL, reason);
                }
            }
            return;
        };
        self.on_hello(handle, session, message.request_id, theirs, now);
    }

    /// A Hello on the connection of `session`: judged (`hello::judge`), then the peer is
    /// up (answered when this node did not dial), or refused, or heard knocking.
    fn on_hello(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        request_id: u64,
        theirs: &Hello,
        now: Instant,
    ) {
        if session.hello_done {
            // One Hello per connection: another would make this node Sync all over again.
            let reason = "Hello was already exchanged on this connection".to_owned();
            self.answer_error(
                handle,
                session,
                request_id,
                ErrorCode::CONFLICT,
                reason,
                now,
            );
            return;
        }
        let opened = match session.peer {
            Some(peer) => Opened::ByThisNode(peer),
            None => Opened::ByPeer(session.conn.remote_address()),
        };
        let certified = tls::certificate_names(&session.conn, &theirs.node_name);
        match hello::judge(theirs, &self.hello(), opened, certified, &self.peers) {
            Verdict::NoCommonVersion { reason } => {
                let _ = session.send_control(&ControlMessage {
                    request_id,
                    body: ControlBody::Error(ErrorBody {
                        code: ErrorCode::UNSUPPORTED_VERSION,
                        message: format!(
                            "this node speaks versions {}..={}",
                            self.versions.start(),
                            self.versions.end()
                        ),
                    }),
                });
                self.refuse(handle, session, now, CLOSE_PROTOCOL, reason);
            }
            Verdict::Refuse { code, reason } => self.refuse(handle, session, now, code, reason),
            Verdict::KnockFrom { peer } => self.knock_heard(peer, session, now),
            Verdict::Up {
                peer,
                version,
                answer,
            } => {
                if answer {
                    session.peer = Some(peer);
                    session.send_hello(self.hello());
                }
                if let Some(old) = self.peers[peer].hello_done(handle, version) {
                    // A newer connection (the peer restarted) replaces the old one.
                    if let Some(old) = self.sessions.get_mut(&old) {
                        old.conn
                            .close(now, CLOSE_SHUTDOWN.into(), "replaced".into());
                    }
                }
                session.hello_done = true;
                session.version = version;
                self.push_event(PeerEvent::Up {
                    peer: PeerId(peer as u32),
                    name: theirs.node_name.clone(),
                    version,
                });
            }
        }
    }

    /// A knock from `index`, which this node dials, on the connection of `session`.
    fn knock_heard(&mut self, index: usize, session: &mut Session, now: Instant) {
        let peer = &self.peers[index];
        tracing::debug!(peer = %peer.name, "knock heard");
        let answered = peer
            .connection()
            .and_then(|c| self.sessions.get(&c))
            .is_some_and(|s| s.conn.stats().udp_rx.datagrams > 0);
        let heard = self.peers[index].knock_heard(answered, now);
        if heard.was_up {
            tracing::info!(peer = %self.peers[index].name, "peer down: it restarted");
            self.push_event(PeerEvent::Down {
                peer: PeerId(index as u32),
                reason: KNOCK_REASON.into(),
            });
        }
        if let Some(old) = heard.stale.and_then(|old| self.sessions.get_mut(&old)) {
            old.conn
                .close(now, CLOSE_SHUTDOWN.into(), KNOCK_REASON.into());
        }
        session
            .conn
            .close(now, CLOSE_KNOCK_HEARD.into(), "dialing".into());
    }

    /// Queues `message` on the session's control stream; when the peer has left too much
    /// unread, counts the message as dropped and closes the connection instead (the next
    /// connection's Sync makes good what was lost). Says whether it was queued.
    fn send_or_close(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        message: &ControlMessage,
        now: Instant,
    ) -> bool {
        if session.send_control(message) {
            return true;
        }
        self.counters.control_dropped += 1;
        let reason = "the peer does not read its control stream";
        self.close(handle, session, CLOSE_OVERFLOW, reason.into(), now);
        false
    }

    /// Answers the request `request_id` with an Error, and counts it.
    fn answer_error(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        request_id: u64,
        code: ErrorCode,
        message: String,
        now: Instant,
    ) {
        let remote = session.conn.remote_address();
        tracing::debug!(%remote, request_id, code = code.0, %message, "control message refused");
        self.counters.control_refused += 1;
        let error = ControlMessage {
            request_id,
            body: ControlBody::Error(ErrorBody { code, message }),
        };
        self.send_or_close(handle, session, &error, now);
    }

    fn refuse(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        now: Instant,
        code: u32,
        reason: String,
    ) {
        let remote = session.conn.remote_address();
        tracing::warn!(%remote, %reason, "peer connection refused");
        self.close(handle, session, code, reason.clone(), now);
        self.push_event(PeerEvent::Refused { remote, reason });
    }

    /// Closes a connection from this side. quinn reports no loss for a connection closed
    /// here, so its peer's state moves on now.
    fn close(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        code: u32,
        reason: String,
        now: Instant,
    ) {
        session.conn.close(now, code.into(), reason.clone().into());
        if let Some(peer) = session.peer {
            if self.peers[peer].ended(handle, now) == Ended::WasUp {
                tracing::info!(peer = %self.peers[peer].name, %reason, "peer down: closed here");
                self.push_event(PeerEvent::Down {
                    peer: PeerId(peer as u32),
                    reason,
                });
            }
        }
    }

    /// The peer closed the connection, or it timed out or failed.
    fn lost(
        &mut self,
        handle: ConnectionHandle,
        session: &Session,
        error: &ConnectionError,
        now: Instant,
    ) {
        let remote = session.conn.remote_address();
        let reason = error.to_string();
        let ended = session.peer.map(|p| (p, self.peers[p].ended(handle, now)));
        match ended {
            Some((peer, Ended::WasUp)) => {
                tracing::info!(peer = %self.peers[peer].name, %remote, %reason, "peer down");
                self.push_event(PeerEvent::Down {
                    peer: PeerId(peer as u32),
                    reason,
                });
            }
            // A knock ends when it is heard (or when no one answers): the peer dials.
            Some((peer, Ended::Knock)) => {
                tracing::debug!(peer = %self.peers[peer].name, %reason, "knock closed");
            }
            // A connection that a newer one replaced (or a knock that is moot) goes
            // quietly: the peer is up, or being dialed again.
            Some((peer, Ended::NotCurrent)) => {
                tracing::debug!(peer = %self.peers[peer].name, %reason, "replaced connection closed");
            }
            // A handshake this node answered that the peer gave up: its application
            // closed it (a knock or a dial made moot by another connection; trust is
            // refused with crypto errors, never so), or it went quiet while another
            // connection with that peer is up. Two daemons that start together do one
            // or the other at every start: the knock sent before this node knew the
            // peer and sent again by QUIC, or the dial the peer replaced on hearing
            // this node's knock.
            None if closed_by_peer(error)
                || (matches!(error, ConnectionError::TimedOut) && self.peer_up_at(remote)) =>
            {
                tracing::debug!(%remote, %reason, "spare handshake given up by the peer");
            }
            _ => {
                // A handshake that failed: most often a certificate this node does not
                // trust, or a peer that does not trust this node's.
                tracing::warn!(%remote, %reason, "peer connection failed");
                self.push_event(PeerEvent::Refused { remote, reason });
            }
        }
    }

    /// Closes every connection, telling the peers (what it sends is polled after).
    pub(crate) fn close_all(&mut self, now: Instant) {
        for session in self.sessions.values_mut() {
            session
                .conn
                .close(now, CLOSE_SHUTDOWN.into(), "shutdown".into());
        }
        self.order.clear();
        self.order.extend(self.sessions.keys().copied());
        self.next_to_transmit = 0;
    }
}

/// The peer a session's frames and control messages are from: known, and Hello done.
fn session_peer(session: &Session) -> Option<PeerId> {
    session
        .peer
        .filter(|_| session.hello_done)
        .map(|p| PeerId(p as u32))
}

/// Whether `session` is a handshake another node began and this one answers. This node's
/// own dials and knocks (at most two per configured peer) do not count against what
/// others may begin: a knock toward a peer that is down would otherwise hold that peer's
/// reserved share, and keep it out once it is back.
fn is_answering_handshake(session: &Session) -> bool {
    session.conn.is_handshaking() && session.conn.side().is_server()
}

/// Whether the peer's application closed the connection. Before the handshake is
/// confirmed QUIC carries that close as a transport error, `APPLICATION_ERROR`, without
/// the application's code (RFC 9000, 10.2.3).
fn closed_by_peer(error: &ConnectionError) -> bool {
    match error {
        ConnectionError::ApplicationClosed(_) => true,
        ConnectionError::ConnectionClosed(close) => {
            close.error_code == TransportErrorCode::APPLICATION_ERROR
        }
        _ => false,
    }
}
