//! Opening a port: the one step of a port's life that the worker hands to its keeper
//! thread whole (`keeper.rs`), and does itself only where it has no keeper.
//!
//! An open waits in the kernel: the UMEM is pinned and zeroed as it registers (megabytes
//! for a port that opens with a large share of the resting frames), the socket's bind,
//! and the program's attach to a veth. Done in the worker, each `add_port` held it off
//! its other ports for 0.7 to 1.5 ms, and a node's first port for 15 to 31 ms.

use crate::packet_port::PacketPort;
use crate::worker::{PortChoice, PortKind};
use crate::xdp_port::{PortError, Steering, XdpMode, XdpPort};
use crate::xdp_redirect::RedirectProgram;

use super::{Port, PACKET_SLOTS};

/// What a port is opened with.
pub(super) struct OpenSpec {
    pub(super) ifname: String,
    pub(super) max_frame: usize,
    pub(super) choice: PortChoice,
    /// The AF_XDP mode the configuration asks for (`None`: the fastest that works).
    pub(super) mode: Option<XdpMode>,
    /// UMEM frames of an AF_XDP port.
    pub(super) frames: usize,
    /// The worker's slot the port goes in: its index in the program's socket map.
    pub(super) slot: u32,
    /// Frames a pass sends at once (`WorkerConfig::batch`): the room its slot keeps.
    pub(super) batch: usize,
}

/// Opens the kind of port `spec` asks for; with `Auto`, AF_XDP, or AF_PACKET when
/// AF_XDP cannot be had (but not when another program holds the interface, which
/// AF_PACKET would not fix). An AF_XDP port's fill ring is stocked before it returns:
/// the program steers frames to it from the moment it is registered.
pub(super) fn open_port(
    spec: &OpenSpec,
    program: Option<&RedirectProgram>,
) -> Result<(Port, PortKind), PortError> {
    let packet = || {
        PacketPort::open(&spec.ifname, spec.max_frame, PACKET_SLOTS)
            .map(|p| (Port::Packet(p), PortKind::AfPacket))
    };
    if spec.choice == PortChoice::AfPacket {
        return packet();
    }
    let steering = match program {
        Some(program) => Steering::Worker(program, spec.slot),
        None => Steering::Libxdp,
    };
    let opened = XdpPort::open(
        &spec.ifname,
        spec.mode,
        spec.max_frame,
        spec.frames,
        steering,
    )
    .map(|mut port| {
        port.refill();
        (PortKind::AfXdp(port.mode()), Port::Xdp(port))
    })
    .map(|(kind, port)| (port, kind));
    match (spec.choice, opened) {
        (
            PortChoice::Auto,
            Err(
                e @ (PortError::Socket { .. } | PortError::AlreadyOpen(_) | PortError::Umem { .. }),
            ),
        ) => {
            tracing::warn!(ifname = spec.ifname, reason = %e, "AF_XDP unavailable, using AF_PACKET");
            packet()
        }
        (_, opened) => opened,
    }
}
