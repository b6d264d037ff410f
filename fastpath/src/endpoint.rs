//! One port used as a traffic endpoint rather than a switch port: it sends frames the
//! caller builds and hands received frames to the caller. `xwire-pktgen` uses it, so that
//! the generator and sink drive the same AF_XDP and AF_PACKET code as the switch.

use std::os::fd::RawFd;

use xsk_rs::config::{FrameSize, UmemConfig};
use xsk_rs::{FrameDesc, Umem};

use crate::packet_port::PacketPort;
use crate::worker::{PortChoice, PortKind, WorkerError};
use crate::xdp_port::{frame_data, write_frame, PortError, XdpMode, XdpPort, UMEM_FRAME_DATA};

struct XdpIo {
    // Field order matters: the port drops before its UMEM.
    port: XdpPort,
    free: Vec<FrameDesc>,
    outgoing: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    fill_target: usize,
    umem: Umem,
}

enum Io {
    Xdp(Box<XdpIo>),
    Packet(PacketPort),
}

/// A single port that sends and receives whole frames.
pub struct Endpoint {
    io: Io,
    kind: PortKind,
}

impl Endpoint {
    /// Opens an endpoint on `ifname` (in the calling thread's netns) for frames up to
    /// `max_frame` bytes, with rings of `ring` frames. `Auto` takes AF_XDP when it can.
    pub fn open(
        ifname: &str,
        max_frame: usize,
        ring: usize,
        choice: PortChoice,
        xdp_mode: Option<XdpMode>,
    ) -> Result<Endpoint, WorkerError> {
        let ring = ring.max(64).next_power_of_two();
        let packet = || -> Result<Endpoint, WorkerError> {
            let port = PacketPort::open(ifname, max_frame, ring)?;
            Ok(Endpoint {
                io: Io::Packet(port),
                kind: PortKind::AfPacket,
            })
        };
        if choice == PortChoice::AfPacket || max_frame > UMEM_FRAME_DATA {
            return packet();
        }
        match Self::open_xdp(ifname, max_frame, ring, xdp_mode) {
            Ok(endpoint) => Ok(endpoint),
            Err(WorkerError::Port(e @ PortError::Socket { .. })) if choice == PortChoice::Auto => {
                tracing::warn!(ifname, reason = %e, "AF_XDP unavailable, using AF_PACKET");
                packet()
            }
            Err(e) => Err(e),
        }
    }

    fn open_xdp(
        ifname: &str,
        max_frame: usize,
        ring: usize,
        mode: Option<XdpMode>,
    ) -> Result<Endpoint, WorkerError> {
        let start = |e: &dyn std::fmt::Display| WorkerError::Start(e.to_string());
        let config = UmemConfig::builder()
            .frame_size(FrameSize::new(4096).map_err(|e| start(&e))?)
            .build()
            .map_err(|e| start(&e))?;
        let count = std::num::NonZeroU32::new((ring * 4) as u32).expect("nonzero");
        let (umem, free) = Umem::new(config, count, false).map_err(|e| start(&e))?;
        let port = XdpPort::open(&umem, ifname, mode, max_frame, None)?;
        let kind = PortKind::AfXdp(port.mode());
        let mut endpoint = Endpoint {
            io: Io::Xdp(Box::new(XdpIo {
                port,
                free,
                outgoing: Vec::with_capacity(ring),
                scratch: vec![FrameDesc::default(); 64],
                fill_target: ring,
                umem,
            })),
            kind,
        };
        endpoint.refill();
        Ok(endpoint)
    }

    pub fn kind(&self) -> PortKind {
        self.kind
    }

    pub fn raw_fd(&self) -> RawFd {
        match &self.io {
            Io::Xdp(x) => x.port.raw_fd(),
            Io::Packet(port) => port.raw_fd(),
        }
    }

    /// Queues one frame (at most the endpoint's `max_frame`); `false` when no buffer or
    /// ring slot is free now. Queued frames leave on `flush`.
    pub fn queue(&mut self, frame: &[u8]) -> bool {
        match &mut self.io {
            Io::Xdp(x) => {
                let XdpIo {
                    free,
                    outgoing,
                    umem,
                    ..
                } = &mut **x;
                if frame.len() > UMEM_FRAME_DATA {
                    return false;
                }
                let Some(mut desc) = free.pop() else {
                    return false;
                };
                // SAFETY: taken from the free list, so owned here alone.
                unsafe { write_frame(umem, &mut desc, frame, false) };
                outgoing.push(desc);
                true
            }
            Io::Packet(port) => port.queue(std::iter::once(frame)),
        }
    }

    /// Sends what was queued (what the TX ring has no room for stays queued), and takes
    /// back the buffers of frames already sent.
    pub fn flush(&mut self) {
        match &mut self.io {
            Io::Xdp(x) => {
                let XdpIo {
                    port,
                    free,
                    outgoing,
                    scratch,
                    ..
                } = &mut **x;
                let room = port.tx_room(outgoing.len());
                // SAFETY: `outgoing` holds descriptors owned here alone.
                let sent = unsafe { port.send(&outgoing[..room]) };
                outgoing.drain(..sent);
                port.kick();
                port.reclaim(scratch, free);
            }
            Io::Packet(port) => port.flush(),
        }
    }

    /// Hands up to `budget` received frames to `take`; returns how many.
    pub fn receive(&mut self, budget: usize, mut take: impl FnMut(&[u8])) -> usize {
        let taken = match &mut self.io {
            Io::Xdp(x) => {
                let XdpIo {
                    port,
                    free,
                    scratch,
                    umem,
                    ..
                } = &mut **x;
                let want = budget.min(scratch.len());
                // SAFETY: `scratch` is this endpoint's own buffer.
                let n = unsafe { port.receive(&mut scratch[..want]) };
                for desc in &scratch[..n] {
                    // SAFETY: just received, owned here until it rejoins the free list.
                    take(unsafe { frame_data(umem, desc) });
                }
                free.extend_from_slice(&scratch[..n]);
                n
            }
            Io::Packet(port) => port.receive(budget, |frame, whole| {
                if whole {
                    take(frame)
                }
            }),
        };
        self.refill();
        taken
    }

    fn refill(&mut self) {
        if let Io::Xdp(x) = &mut self.io {
            let XdpIo {
                port,
                free,
                fill_target,
                ..
            } = &mut **x;
            let want = fill_target.saturating_sub(port.in_fill).min(free.len());
            if want > 0 {
                let from = free.len() - want;
                // SAFETY: free descriptors are owned here alone.
                let given = unsafe { port.fill(&free[from..]) };
                free.drain(from..from + given);
            }
        }
    }
}
