//! The seam between the switch and whatever carries its remote wires' frames to other
//! nodes. The switch decides where a frame goes (`LinkTable::decide`); for a frame whose
//! verdict names a peer node it hands the frame to a `RemoteTransport`, and it delivers
//! whatever frames the transport received from peers. It does not know how they travel:
//! today the one implementation is QUIC (`peer::PeerTransport`, whose DATAGRAM and stream
//! carriers are the link's `Carrier`, passed through untouched), and a kernel VXLAN wire
//! never reaches the switch at all. A transport of another kind implements this trait and
//! is handed to a worker with `Worker::attach_transport`; nothing in `switch/` changes.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use xwire_proto::control::{Carrier, ControlMessage};
use xwire_proto::WireId;

use crate::stats::PeerStats;

/// What crosses the seam, besides frames: defined beside the QUIC transport, which was
/// first, and named here so that the switch asks only this module.
pub use crate::peer::{
    Flush, NotSent, PeerError, PeerEvent, PeerId, Polled, ReceivedFrame, TransportCounters,
};

/// What a worker does with the transport to its peer nodes: frames out and in, the peers'
/// declarations and control messages, and when it wants time. Every method is called on
/// the worker's thread, between passes or within one.
pub trait RemoteTransport: Send {
    /// The address the transport receives on.
    fn local_addr(&self) -> SocketAddr;

    /// What the worker watches while it sleeps: readable when peers sent something.
    fn as_fd(&self) -> BorrowedFd<'_>;

    /// Queues one frame of `wire` for `peer`, on the link's own `carrier` or, with
    /// `None`, the peer's. It leaves by the next `poll` (at once with `Flush::Now`).
    fn send_frame(
        &mut self,
        now: Instant,
        peer: PeerId,
        wire: WireId,
        frame: &[u8],
        carrier: Option<Carrier>,
    ) -> Result<(), NotSent>;

    /// One round of work: takes what arrived, sends what is queued and due. The frames
    /// that arrived are then `next_frame`'s.
    fn poll(&mut self, flush: Flush) -> Polled;

    /// The next frame received from a peer; its bytes stay valid until the next call
    /// that takes `&mut self`.
    fn next_frame(&mut self) -> Option<ReceivedFrame<'_>>;

    /// The frame taken last was for a link the worker does not know.
    fn count_unknown_link(&mut self);

    /// How long the worker may sleep before `poll` is due with nothing arriving.
    fn timeout(&mut self) -> Option<Duration>;

    /// Declares a peer node at `addr`, whose links travel on `carrier` unless they say
    /// otherwise; declaring a known name again updates it.
    fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
        now: Instant,
    ) -> Result<PeerId, PeerError>;

    /// The peer node left: its connection closes until `add_peer` declares it again.
    /// False for an unknown peer.
    fn retire_peer(&mut self, peer: PeerId, now: Instant) -> bool;

    /// Sends a control message to a peer that is up; false when it is not.
    fn send_control(&mut self, now: Instant, peer: PeerId, message: &ControlMessage) -> bool;

    /// The transport's counters.
    fn counters(&self) -> TransportCounters;

    /// Each declared peer's connection statistics.
    fn peer_stats(&mut self) -> Vec<PeerStats>;

    /// The events for the control plane since the last call.
    fn take_events(&mut self) -> Vec<PeerEvent>;

    /// Closes every connection, telling the peers: the worker is stopping.
    fn close(&mut self);
}

/// Makes a worker's transport on the worker's own thread (so that its socket is bound in
/// the worker's network namespace), or says why it could not.
pub type BindTransport =
    Box<dyn FnOnce() -> Result<Box<dyn RemoteTransport>, PeerError> + Send + 'static>;
