//! Wires across nodes: one QUIC connection per peer node (quinn-proto, driven by the
//! caller's loop, so that the data worker can own it with no thread hand-off on the frame
//! path), mutual TLS from a cluster CA, frames multiplexed by link UID on QUIC DATAGRAM
//! or on a stream, and a control stream that carries wire-proto control messages.
//!
//! Who dials: of two nodes, the one whose name sorts first. It redials with backoff when
//! the connection is lost; the other accepts, and learns the peer's name from its Hello
//! (which must match the name in the peer's certificate). Each peer's life is one state
//! machine (`state.rs`).
//!
//! All of it is a `PeerEndpoint` with no socket and no clock (tested in memory); a
//! `PeerTransport` drives one with a UDP socket for the worker.

mod congestion;
mod endpoint;
mod hello;
mod inbox;
mod refusals;
mod session;
mod state;
mod tls;
mod transmit;
mod transport;
mod udp;

use std::net::SocketAddr;
use std::ops::RangeInclusive;

use xwire_proto::control::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};

pub(crate) use congestion::UNTHROTTLED as UNTHROTTLED_WINDOW;
pub use endpoint::{NotSent, PeerEndpoint};
pub use inbox::ReceivedFrame;
pub(crate) use tls::seed_random;
pub use transmit::{Flush, Transmit};
pub use transport::{PeerTransport, Polled};
pub use xwire_pki::NodeIdentity;
pub use xwire_proto::control::{Carrier, ControlMessage};

/// A peer node, as this transport numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub u32);

/// How a transport is set up.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    pub identity: NodeIdentity,
    /// The UDP address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// The underlay's MTU: QUIC starts its packets at this size less the IP and UDP
    /// headers, and discovers more if the path allows.
    pub underlay_mtu: u16,
    /// The control protocol versions this node speaks (its Hello offers them).
    pub versions: RangeInclusive<u16>,
}

impl PeerConfig {
    /// A node listening on `listen` with a 1500-byte underlay and this build's versions.
    pub fn new(identity: NodeIdentity, listen: SocketAddr) -> PeerConfig {
        PeerConfig {
            identity,
            listen,
            underlay_mtu: 1500,
            versions: MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION,
        }
    }
}

/// What happened to a peer, for the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// Hello exchanged: the peer is up and carries frames, and speaks control protocol
    /// `version`.
    Up {
        peer: PeerId,
        name: String,
        version: u16,
    },
    /// The connection is gone (the dialing side redials).
    Down { peer: PeerId, reason: String },
    /// A control message from the peer other than Hello.
    Control {
        peer: PeerId,
        message: ControlMessage,
    },
    /// A connection was refused: a certificate from another CA, a name that does not
    /// match its certificate, or a protocol version this node does not speak.
    Refused { remote: SocketAddr, reason: String },
}

/// What the transport counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportCounters {
    pub frames_sent: u64,
    /// Frames received from peers, those for a link the switch does not know included.
    pub frames_received: u64,
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    /// Frames sent on a stream (the stream carrier, or too large for a datagram).
    pub stream_frames_sent: u64,
    /// Frames dropped on the way out: no connection to the peer, or no room.
    pub dropped_no_peer: u64,
    pub dropped_blocked: u64,
    /// Frames received for a link UID the receiver does not know (or before Hello).
    pub dropped_unknown_link: u64,
    /// Frames received and dropped because the owner had left too many untaken.
    pub dropped_unread: u64,
    /// Datagrams, stream records or control messages that did not decode.
    pub malformed: u64,
    /// QUIC packets the UDP socket would not take (its buffer full): QUIC resends what
    /// needs resending, and a DATAGRAM batch in them is lost.
    pub udp_send_failed: u64,
    /// Receive buffers made: a few at the start, then one whenever every buffer still
    /// lends datagrams to frames not yet taken (more means the pool is too small).
    pub recv_buffers_made: u64,
    /// Connections this node began to a peer it dials (knocks not included): more than
    /// one per restart of the peer means handshakes are failing.
    pub dials: u64,
    /// Handshakes not even begun: from an address that is no peer's, or with too many
    /// already in progress.
    pub handshakes_refused: u64,
    /// Handshakes answered with a QUIC Retry (the client must prove it receives at its
    /// address before any state is kept): from an address with handshakes in progress.
    pub handshakes_retried: u64,
    /// Control messages answered with an Error instead of acted on: undecodable ones, and
    /// a Hello on a connection that had its Hello.
    pub control_refused: u64,
    /// Control messages lost because a queue was full: the control events not yet taken
    /// by the control plane, or the messages a peer left unread. The connection is closed
    /// when it happens, and the Sync of the next one makes good what was lost.
    pub control_dropped: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("node identity: {0}")]
    Identity(String),
    #[error("UDP socket on {addr}: {cause}")]
    Socket {
        addr: SocketAddr,
        cause: std::io::Error,
    },
    #[error("peer name {0:?} is not a valid DNS name")]
    BadName(String),
}
