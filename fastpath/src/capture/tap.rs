//! A capture tap on a link: the worker offers each frame of a captured direction, with
//! the time it saw it; the tap copies it (up to the snap length) into a bounded queue that
//! the writer drains on another thread. A full queue never slows the wire: the frame is
//! left out of the capture and counted. A link without a tap pays one branch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};

/// The two directions of a link, as a capture names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the link's A end towards its B end.
    AToB,
    BToA,
}

impl Direction {
    /// The capture file's interface index for the direction.
    pub fn index(self) -> u32 {
        match self {
            Direction::AToB => 0,
            Direction::BToA => 1,
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub direction: Direction,
    /// Nanoseconds since the Unix epoch, taken in the switch.
    pub timestamp_ns: u64,
    /// The frame's length on the wire; `data` may be shorter (the snap length).
    pub original_len: u32,
    pub data: Vec<u8>,
}

/// What each direction of a tap saw and left out.
#[derive(Debug, Default)]
pub struct TapCounters {
    pub offered: [AtomicU64; 2],
    pub dropped: [AtomicU64; 2],
}

/// The worker's side of a tap.
pub struct Tap {
    directions: [bool; 2],
    snaplen: usize,
    queue: Sender<Captured>,
    counters: Arc<TapCounters>,
}

/// The writer's side: the frames, and the counters for the file's statistics.
pub struct TapReader {
    pub frames: Receiver<Captured>,
    pub counters: Arc<TapCounters>,
}

impl Tap {
    /// A tap for `directions`, copying at most `snaplen` bytes of each frame, holding at
    /// most `queue` frames the writer has not taken yet.
    pub fn new(directions: &[Direction], snaplen: usize, queue: usize) -> (Tap, TapReader) {
        let (sender, frames) = crossbeam_channel::bounded(queue);
        let counters = Arc::new(TapCounters::default());
        let mut wanted = [false; 2];
        for d in directions {
            wanted[d.index() as usize] = true;
        }
        (
            Tap {
                directions: wanted,
                snaplen,
                queue: sender,
                counters: counters.clone(),
            },
            TapReader { frames, counters },
        )
    }

    /// Offers a frame seen going `direction` at `timestamp_ns`. False when the tap's
    /// reader has gone (the capture ended): the worker then removes the tap.
    pub fn offer(&self, direction: Direction, timestamp_ns: u64, frame: &[u8]) -> bool {
        let index = direction.index() as usize;
        if !self.directions[index] {
            return true;
        }
        self.counters.offered[index].fetch_add(1, Ordering::Relaxed);
        let captured = Captured {
            direction,
            timestamp_ns,
            original_len: frame.len() as u32,
            data: frame[..frame.len().min(self.snaplen)].to_vec(),
        };
        match self.queue.try_send(captured) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                self.counters.dropped[index].fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_and_only_chosen_directions_are_taken() {
        let (tap, reader) = Tap::new(&[Direction::AToB], 4, 2);
        for n in 0..5u8 {
            assert!(tap.offer(Direction::AToB, u64::from(n), &[n; 10]));
            assert!(tap.offer(Direction::BToA, u64::from(n), &[n; 10]));
        }
        let got: Vec<Captured> = reader.frames.try_iter().collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].data, [0; 4], "cut at the snap length");
        assert_eq!(got[0].original_len, 10);
        assert_eq!(reader.counters.offered[0].load(Ordering::Relaxed), 5);
        assert_eq!(reader.counters.dropped[0].load(Ordering::Relaxed), 3);
        assert_eq!(reader.counters.offered[1].load(Ordering::Relaxed), 0);
        drop(reader);
        assert!(!tap.offer(Direction::AToB, 9, &[9]), "the capture ended");
    }
}
