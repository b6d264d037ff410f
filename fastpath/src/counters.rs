//! Per-link counters: frames, bytes and drops by reason, in each direction.
//!
//! Each link's counters have one writer, the worker that owns the link, so updates are a
//! relaxed load and store (no locked instruction on the frame path); any thread may read
//! them at any time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a frame was dropped. Every drop on the frame path has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum DropReason {
    /// The frame arrived on a port that is in no link.
    NoLink = 0,
    /// Larger than the outgoing port can carry.
    TooLarge = 1,
    /// Shorter than an Ethernet header.
    Runt = 2,
    /// The outgoing port's TX ring (or socket) had no room.
    TxFull = 3,
    /// No free frame buffer to copy into.
    NoBuffer = 4,
    /// The link's peer node is not connected.
    PeerDown = 5,
    /// Lost by the link's impairment (its loss setting).
    ImpairLoss = 6,
    /// The link's rate limit queue was full (tail drop).
    RateQueueFull = 7,
    /// The worker already holds as many delayed frames of this link and direction as it
    /// may (`impairment::HELD_PER_DIRECTION`).
    HeldFull = 8,
    /// The link's peer node is connected, but its carrier had no room (QUIC's datagram
    /// send buffer or the stream's window full): offered more than the wire carries.
    CarrierFull = 9,
}

impl DropReason {
    pub const ALL: [DropReason; 10] = [
        DropReason::NoLink,
        DropReason::TooLarge,
        DropReason::Runt,
        DropReason::TxFull,
        DropReason::NoBuffer,
        DropReason::PeerDown,
        DropReason::ImpairLoss,
        DropReason::RateQueueFull,
        DropReason::HeldFull,
        DropReason::CarrierFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::NoLink => "no_link",
            DropReason::TooLarge => "too_large",
            DropReason::Runt => "runt",
            DropReason::TxFull => "tx_full",
            DropReason::NoBuffer => "no_buffer",
            DropReason::PeerDown => "peer_down",
            DropReason::ImpairLoss => "impair_loss",
            DropReason::RateQueueFull => "rate_queue_full",
            DropReason::HeldFull => "held_full",
            DropReason::CarrierFull => "carrier_full",
        }
    }
}

/// A link's two directions: from its first port to its second, and back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    AToB = 0,
    BToA = 1,
}

#[derive(Debug, Default)]
struct DirectionCounters {
    frames: AtomicU64,
    bytes: AtomicU64,
    drops: [AtomicU64; DropReason::ALL.len()],
}

/// The counters of one link.
#[derive(Debug, Default)]
pub struct LinkCounters {
    directions: [DirectionCounters; 2],
}

/// A copy of one direction's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirectionSnapshot {
    pub frames: u64,
    pub bytes: u64,
    pub drops: [u64; DropReason::ALL.len()],
}

impl DirectionSnapshot {
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    // Single writer: see the module comment.
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

impl LinkCounters {
    /// Counts frames forwarded. Only the owning worker calls this.
    pub fn forwarded(&self, direction: Direction, frames: u64, bytes: u64) {
        let d = &self.directions[direction as usize];
        bump(&d.frames, frames);
        bump(&d.bytes, bytes);
    }

    /// Counts frames dropped. Only the owning worker calls this.
    pub fn dropped(&self, direction: Direction, reason: DropReason, frames: u64) {
        bump(
            &self.directions[direction as usize].drops[reason as usize],
            frames,
        );
    }

    pub fn snapshot(&self, direction: Direction) -> DirectionSnapshot {
        let d = &self.directions[direction as usize];
        let mut drops = [0; DropReason::ALL.len()];
        for (out, counter) in drops.iter_mut().zip(&d.drops) {
            *out = counter.load(Ordering::Relaxed);
        }
        DirectionSnapshot {
            frames: d.frames.load(Ordering::Relaxed),
            bytes: d.bytes.load(Ordering::Relaxed),
            drops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_reasons_are_counted_apart() {
        let c = LinkCounters::default();
        c.forwarded(Direction::AToB, 3, 300);
        c.forwarded(Direction::AToB, 1, 64);
        c.dropped(Direction::BToA, DropReason::TxFull, 2);
        let ab = c.snapshot(Direction::AToB);
        let ba = c.snapshot(Direction::BToA);
        assert_eq!((ab.frames, ab.bytes, ab.total_drops()), (4, 364, 0));
        assert_eq!(
            (ba.frames, ba.dropped(DropReason::TxFull), ba.total_drops()),
            (0, 2, 2)
        );
    }

    #[test]
    fn reason_indices_match_the_list() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{}", r.name());
        }
    }
}
