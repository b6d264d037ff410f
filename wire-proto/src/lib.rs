//! Every byte format of xwire, sans-IO: no sockets, no async, no threads.
//!
//! * [`data`]: Ethernet frames between nodes, tagged with their wire's id, batched into a
//!   QUIC DATAGRAM or framed on a QUIC stream.
//! * [`control`]: messages between node daemons on a peer connection's control stream.
//! * [`local`]: the local API between the CNI plugin and its node daemon.
//! * [`framing`]: the length prefix that `control` and `local` records share.
//!
//! FORMAT.md documents each layout, its version field, and what a reader does with a
//! newer version or an unknown message type.

#![forbid(unsafe_code)]

pub mod control;
pub mod data;
pub mod framing;
pub mod local;
mod stable_hash;
mod wire_id;

pub use stable_hash::{fnv1a32, fnv1a64};
pub use wire_id::WireId;

/// Why bytes could not be decoded. Every decoder in this crate returns this, never panics,
/// and allocates at most in proportion to the bytes it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("input ends inside a record")]
    Truncated,
    #[error("record of {len} bytes exceeds the limit of {max}")]
    TooLong { len: usize, max: usize },
    #[error("format version {0} is not supported")]
    UnsupportedVersion(u32),
    #[error("unknown datagram or stream kind {0}")]
    UnknownKind(u8),
    #[error("unknown control message type {code} (request {request_id})")]
    UnknownControlType { code: u8, request_id: u64 },
    #[error("unknown local API message type {name:?} (id {id})")]
    UnknownLocalType { name: String, id: u64 },
    #[error("a datagram with no frames")]
    Empty,
    #[error("{0} bytes after the last record")]
    TrailingBytes(usize),
    #[error("frame of {0} bytes is shorter than an Ethernet header")]
    FrameTooShort(usize),
    #[error("malformed message: {0}")]
    Malformed(String),
}
