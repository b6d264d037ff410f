//! What the endpoint hands its driver to send, and when it sends the frames it holds.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The longest a frame waits for more to share its datagram (or stream write) while the
/// caller says more frames are coming.
pub(crate) const MAX_HOLD: Duration = Duration::from_micros(50);

/// When the frames queued by `send_frame` leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// Now: nothing more is coming soon (the caller's ports were empty this pass).
    Now,
    /// Once full, or after waiting `MAX_HOLD`: the caller is busy, and more frames will
    /// share the datagram. Under load this turns one packet per pass into full packets.
    WhenDue,
}

/// One UDP send: `size` bytes of the caller's buffer to `destination`, in segments of
/// `segment_size` (GSO) when given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    /// The ECN codepoint's bits.
    pub ecn: Option<u8>,
    pub size: usize,
    pub segment_size: Option<usize>,
    pub src_ip: Option<IpAddr>,
}

impl Transmit {
    pub(crate) fn from_quinn(t: &quinn_proto::Transmit) -> Transmit {
        Transmit {
            destination: t.destination,
            ecn: t.ecn.map(|e| e as u8),
            size: t.size,
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        }
    }

    /// UDP datagrams in it.
    pub fn datagrams(&self) -> usize {
        self.segment_size
            .map_or(1, |size| self.size.div_ceil(size.max(1)))
    }
}
