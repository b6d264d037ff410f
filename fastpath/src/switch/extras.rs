//! What the switch does on some links only: impairments and capture. A link with neither
//! costs one vector lookup per frame. An impaired direction decides each frame's fate
//! (`impairment::Direction`); frames that must wait are copied out of the port's UMEM into
//! a pooled buffer and held in the worker's one time-ordered queue (`impairment::Held`)
//! until the pass in which their time comes. Frames are offered to a link's capture tap
//! as they leave the switch, after their impairment: the file shows what the far end got.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use xwire_proto::WireId;

use crate::capture::{self, Tap};
use crate::counters::{Direction, DropReason};
use crate::impairment::{self, Fate, Held, ImpairmentSpec, HELD_PER_DIRECTION};
use crate::link_table::{LinkTable, Verdict};

/// Buffers of released frames kept for the next held ones, so that a steady delayed
/// flow allocates nothing.
const SPARE_BUFFERS: usize = 4096;

/// The impairments and the tap of one link.
struct Extras {
    impair: [Option<impairment::Direction>; 2],
    tap: Option<Tap>,
    /// The link direction the tap calls `AToB`: away from the end it was asked for.
    tap_from: Direction,
}

impl Extras {
    fn is_empty(&self) -> bool {
        self.impair.iter().all(Option::is_none) && self.tap.is_none()
    }
}

/// A frame held until its time, and where it goes then.
struct HeldFrame {
    bytes: Vec<u8>,
    verdict: Verdict,
}

/// The per-link extras of one worker and the frames it holds for them.
pub(super) struct LinkExtras {
    /// Indexed like the link table's links.
    links: Vec<Option<Extras>>,
    /// Keyed by (link, direction).
    held: Held<(usize, u8), HeldFrame>,
    spare: Vec<Vec<u8>>,
}

impl Default for LinkExtras {
    fn default() -> Self {
        LinkExtras {
            links: Vec::new(),
            held: Held::new(HELD_PER_DIRECTION),
            spare: Vec::new(),
        }
    }
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl LinkExtras {
    fn slot(&mut self, link: usize) -> &mut Extras {
        if self.links.len() <= link {
            self.links.resize_with(link + 1, || None);
        }
        self.links[link].get_or_insert_with(|| Extras {
            impair: [None, None],
            tap: None,
            tap_from: Direction::AToB,
        })
    }

    /// Drops a link's extras once nothing is in force and no frame of it is held (a
    /// frame sent while some are held must queue behind them).
    fn tidy(&mut self, link: usize) {
        let holds = self.held.held(&(link, 0)) + self.held.held(&(link, 1)) > 0;
        if !holds && self.links[link].as_ref().is_some_and(Extras::is_empty) {
            self.links[link] = None;
        }
    }

    /// Sets (or with `None`, clears) the impairment of one direction of a link. Frames
    /// already held keep their time: clearing loses none of them, and a frame sent after
    /// the clear waits behind them rather than overtaking them.
    pub(super) fn set_impairment(
        &mut self,
        link: usize,
        wire: WireId,
        direction: Direction,
        spec: Option<ImpairmentSpec>,
    ) {
        let extras = self.slot(link);
        let current = &mut extras.impair[direction as usize];
        // An impairment of all zeros stays in force (each frame is decided, and sent at
        // once): that is how its cost is measured. Only `None` takes it away.
        match (spec, current.as_mut()) {
            (None, _) => *current = None,
            (Some(spec), Some(impaired)) => impaired.set(spec),
            (Some(spec), None) => {
                // Seeded by the wire, so that a rerun of a lab draws the same fates.
                let seed = wire.0.rotate_left(1) ^ direction as u64;
                *current = Some(impairment::Direction::new(spec, seed));
            }
        }
        self.tidy(link);
    }

    /// Puts a capture tap on a link, replacing any other; `from` is the link direction
    /// that the tap names `AToB`.
    pub(super) fn set_tap(&mut self, link: usize, tap: Tap, from: Direction) {
        let extras = self.slot(link);
        extras.tap = Some(tap);
        extras.tap_from = from;
    }

    /// The link at `index` is gone: its extras go, and so do the frames it holds (their
    /// port or peer may be another link's by the time they are due).
    pub(super) fn forget(&mut self, link: usize) {
        if let Some(slot) = self.links.get_mut(link) {
            *slot = None;
        }
        for direction in [0, 1] {
            for frame in self.held.drain_key(&(link, direction)) {
                self.recycle(frame.bytes);
            }
        }
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(bytes);
        }
    }

    fn copy(&mut self, frame: &[u8]) -> Vec<u8> {
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(frame);
        bytes
    }

    /// Whether frames on `link` need more than a plain send.
    #[inline]
    pub(super) fn has(&self, link: usize) -> bool {
        matches!(self.links.get(link), Some(Some(_)))
    }

    /// Offers a frame that left on `link` going `direction` to the link's tap, if any;
    /// a tap whose reader has gone is removed.
    pub(super) fn tap(&mut self, link: usize, direction: Direction, frame: &[u8]) {
        let Some(Some(extras)) = self.links.get_mut(link) else {
            return;
        };
        let Some(tap) = &extras.tap else {
            return;
        };
        let named = if direction == extras.tap_from {
            capture::Direction::AToB
        } else {
            capture::Direction::BToA
        };
        if !tap.offer(named, unix_nanos(), frame) {
            extras.tap = None;
            self.tidy(link);
        }
    }

    /// Sends (with `send`), holds or drops one frame that `verdict` sends on a link with
    /// extras, as the link's impairment decides.
    pub(super) fn admit(
        &mut self,
        table: &LinkTable,
        verdict: Verdict,
        frame: &[u8],
        now: Instant,
        mut send: impl FnMut(&[u8], Verdict),
    ) {
        let Some((link, direction)) = verdict.link() else {
            return;
        };
        let key = (link, direction as u8);
        let fate = match self.links.get_mut(link) {
            Some(Some(extras)) => extras.impair[direction as usize]
                .as_mut()
                .map(|d| d.decide(now, frame.len())),
            _ => None,
        };
        let (at, copies, flip_bit) = match fate {
            // Not impaired (any longer): behind whatever this direction still holds.
            None => (self.held.latest(&key).map_or(now, |t| t.max(now)), 1, None),
            Some(Fate::Drop(why)) => {
                let reason = match why {
                    impairment::DropReason::Loss => DropReason::ImpairLoss,
                    impairment::DropReason::QueueFull => DropReason::RateQueueFull,
                };
                if let Some(counters) = table.counters(link) {
                    counters.dropped(direction, reason, 1);
                }
                return;
            }
            Some(Fate::Send {
                at,
                copies,
                flip_bit,
            }) => (at, copies, flip_bit),
        };
        for copy in 0..copies {
            // A frame due now goes at once unless frames of its direction are still
            // held, which it must not overtake.
            if at <= now && flip_bit.is_none() && self.held.held(&key) == 0 {
                self.tap(link, direction, frame);
                send(frame, verdict);
                continue;
            }
            let mut bytes = self.copy(frame);
            if let (Some(bit), 0) = (flip_bit, copy) {
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
            if let Err(refused) = self.held.hold(key, at, HeldFrame { bytes, verdict }) {
                self.recycle(refused.bytes);
                if let Some(counters) = table.counters(link) {
                    counters.dropped(direction, DropReason::HeldFull, 1);
                }
            }
        }
    }

    /// Sends every held frame whose time has come, in time order; returns how many.
    pub(super) fn release_due(
        &mut self,
        now: Instant,
        mut send: impl FnMut(&[u8], Verdict),
    ) -> usize {
        let mut released = 0;
        while let Some((key, frame)) = self.held.pop_due(now) {
            if let Some((link, direction)) = frame.verdict.link() {
                self.tap(link, direction, &frame.bytes);
            }
            send(&frame.bytes, frame.verdict);
            self.recycle(frame.bytes);
            released += 1;
            if self.held.held(&key) == 0 {
                self.tidy(key.0);
            }
        }
        released
    }

    /// When the next held frame is due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.held.next_due()
    }

    /// Frames held for one direction of a link.
    pub(super) fn held(&self, link: usize, direction: Direction) -> usize {
        self.held.held(&(link, direction as u8))
    }
}
