//! The xwire data plane: ports, pinned poll-mode workers and the link table (see DESIGN.md).
//!
//! Unsafe code, each use with a `// SAFETY:` comment: the AF_XDP rings and UMEM that
//! the kernel shares with the worker (`xdp_port.rs`, `xdp_redirect.rs`,
//! `steered_port.rs`), AF_PACKET's mapped rings (`packet_port.rs`), a clock read
//! (`endpoint.rs`), a receive buffer's length once the kernel has filled it and the
//! ioctl that reads a datagram's receive timestamp (`peer/udp.rs`), and a sysconf call
//! (`switch/keeper.rs`). The ethtool ioctl that steering needs is `xwire-ethtool`'s.

pub mod capture;
pub mod counters;
pub mod endpoint;
pub mod impairment;
pub mod link_table;
mod nice;
mod packet_port;
pub mod peer;
mod peer_control;
pub mod remote_transport;
pub mod stats;
pub mod steered_port;
mod switch;
pub mod worker;
pub(crate) mod xdp_port;
mod xdp_redirect;

pub use counters::{Direction, DropReason, LinkCounters};
pub use endpoint::Endpoint;
pub use link_table::PortId;
pub use peer_control::PeerControl;
pub use steered_port::SteeredEnd;
pub use worker::{
    PortChoice, PortInfo, PortKind, RemotePort, SteeredPair, Worker, WorkerConfig, WorkerError,
};
pub use xdp_port::{KernelDrops, PortError, XdpMode, NATIVE_MAX_FRAME};
pub use xwire_proto::WireId;

/// Gives the calling thread the place in the scheduler a worker thread takes at `nice`
/// (the nice value and the shortest slice: `nice.rs` says why). For the threads of a
/// traffic generator and sink that share CPUs with workers: at nice 0 beside workers at
/// -20, a sink's socket dropped what the wire had carried to it.
pub fn set_thread_nice(nice: i8) -> std::io::Result<()> {
    nice::set(nice, nice::SLICE)
}
