//! The shape of a port's UMEM and rings, and making the UMEM.

use std::error::Error as _;

use xsk_rs::config::{FrameSize, QueueSize, UmemConfig};
use xsk_rs::{FrameDesc, Umem};

use super::PortError;

/// A UMEM of `frames` 4 KiB frames (the free list holds them all).
pub(super) fn new_umem(
    ifname: &str,
    layout: &UmemLayout,
) -> Result<(Umem, Vec<FrameDesc>), PortError> {
    let fail = |reason: String| PortError::Umem {
        ifname: ifname.into(),
        frames: layout.frames,
        reason,
    };
    let config = UmemConfig::builder()
        .frame_size(FrameSize::new(layout.frame_size).map_err(|e| fail(e.to_string()))?)
        .fill_queue_size(layout.ring)
        .comp_queue_size(layout.ring)
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let count = u32::try_from(layout.frames)
        .ok()
        .and_then(std::num::NonZeroU32::new)
        .ok_or_else(|| fail("too many frames".into()))?;
    let (umem, free) = Umem::new(config, count, false).map_err(|e| {
        let detail = e.source().map(|s| format!(": {s}")).unwrap_or_default();
        fail(format!("{e}{detail}"))
    })?;
    Ok((umem, free))
}

/// The kernel's headroom before the data in every UMEM frame (XDP_PACKET_HEADROOM).
const XDP_HEADROOM: usize = 256;
/// The UMEM frame sizes: the kernel's smallest, for frames up to a 1500-byte MTU and a
/// few tags, and a page for larger ones. The kernel pins and the daemon faults in every
/// byte of a UMEM when the port opens, so at a restart of a node with many ports the
/// smaller frame halves the time spent there (and the memory).
const SMALL_FRAME: usize = 2048;
const LARGE_FRAME: usize = 4096;
/// The most frame data one UMEM frame holds, in the larger frame size.
pub(crate) const MAX_FRAME_ROOM: usize = LARGE_FRAME - XDP_HEADROOM;

/// The shape of one port's UMEM and rings.
pub(super) struct UmemLayout {
    pub(super) frames: usize,
    pub(super) frame_size: u32,
    /// The size of all four rings: no ring ever holds more than the port's frames.
    pub(super) ring: QueueSize,
}

impl UmemLayout {
    pub(super) fn for_port(
        ifname: &str,
        max_frame: usize,
        frames: usize,
    ) -> Result<UmemLayout, PortError> {
        let frames = frames.max(2);
        let frame_size = if max_frame <= SMALL_FRAME - XDP_HEADROOM {
            SMALL_FRAME
        } else {
            LARGE_FRAME
        };
        let ring = u32::try_from(frames.next_power_of_two())
            .ok()
            .and_then(|n| QueueSize::new(n).ok())
            .ok_or_else(|| PortError::Umem {
                ifname: ifname.into(),
                frames,
                reason: "too many frames for a ring".into(),
            })?;
        Ok(UmemLayout {
            frames,
            frame_size: frame_size as u32,
            ring,
        })
    }

    pub(super) fn frame_room(&self) -> usize {
        self.frame_size as usize - XDP_HEADROOM
    }
}
/// The frames of a port of `frames` kept out of its fill ring, for frames on their way
/// out. The fill ring takes the rest: what it holds is the burst a port absorbs while
/// its worker is not looking, the kernel having nowhere else to put a frame, while a
/// burst out of a port is sent in pieces as it is written (`Slot::make_room`), a kick
/// sending and completing up to 32 frames in copy mode. An eighth, and at least two of
/// the longest chains (a jumbo frame takes up to `MAX_CHAIN` descriptors).
pub(super) fn tx_reserve(frames: usize) -> usize {
    (frames / 8).max(36).min(frames / 2)
}
