//! A steady stream of numbered test frames from one interface to another, counted where
//! it arrives: what restart tests watch to see that a wire kept forwarding, or how long
//! it stopped. The sender and the receiver are threads holding raw sockets on the two
//! interfaces; both stop when the flow is stopped or dropped, or after `MAX_RUN`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::checks::{test_frame, TEST_ETHERTYPE};
use super::{Error, Netns, RawSocket};

/// The longest a flow runs, whatever its owner does.
const MAX_RUN: Duration = Duration::from_secs(300);
const FRAME_LEN: usize = 96;

/// What a flow has counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowCounts {
    pub sent: u64,
    /// Sends the kernel refused (the sending interface went away, for one).
    pub send_errors: u64,
    pub received: u64,
    /// Frames that reached the receiving interface but were dropped at the flow's own
    /// receiving socket (its buffer was full while its thread was not running): the
    /// test's reader, not the wire, lost them.
    pub reader_dropped: u64,
}

impl FlowCounts {
    /// Frames sent and never seen (those still in flight when counted included).
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.received)
    }

    /// What the wire lost: `lost` less what the flow's own reader dropped.
    pub fn lost_on_the_way(&self) -> u64 {
        self.lost().saturating_sub(self.reader_dropped)
    }
}

#[derive(Default)]
struct Shared {
    stop_sending: AtomicBool,
    stop: AtomicBool,
    sent: AtomicU64,
    send_errors: AtomicU64,
    received: AtomicU64,
    reader_dropped: AtomicU64,
}

/// Frames from `from:from_if` to `to:to_if`, one every `interval`.
pub struct Flow {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    pub name: String,
}

impl Flow {
    /// Starts the flow; `sender` tells its frames from other flows' on the same wire.
    pub fn start(
        name: &str,
        (from, from_if): (&Netns, &str),
        (to, to_if): (&Netns, &str),
        sender: u8,
        interval: Duration,
    ) -> Result<Flow, Error> {
        let tx = RawSocket::open(from, from_if)?;
        let rx = RawSocket::open(to, to_if)?;
        let shared = Arc::new(Shared::default());
        let started = Instant::now();
        let receiving = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let count_drops = || {
                    if let Ok(dropped) = rx.take_drops() {
                        shared.reader_dropped.fetch_add(dropped, Ordering::Relaxed);
                    }
                };
                let mut reads: u32 = 0;
                while !shared.stop.load(Ordering::Relaxed) && started.elapsed() < MAX_RUN {
                    // Every 512 reads, not every read: a system call per frame would slow
                    // the reader that it counts.
                    reads = reads.wrapping_add(1);
                    if reads % 512 == 0 {
                        count_drops();
                    }
                    let Ok(Some(frame)) = rx.recv(Duration::from_millis(50)) else {
                        count_drops();
                        continue;
                    };
                    if frame.len() < 14 || frame[12..14] != TEST_ETHERTYPE || frame[11] != sender {
                        continue;
                    }
                    shared.received.fetch_add(1, Ordering::Relaxed);
                }
                count_drops();
            })
        };
        let sending = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut seq: u16 = 0;
                let mut next = Instant::now();
                while !shared.stop_sending.load(Ordering::Relaxed) && started.elapsed() < MAX_RUN {
                    match tx.send(&test_frame(FRAME_LEN, sender, seq)) {
                        Ok(()) => shared.sent.fetch_add(1, Ordering::Relaxed),
                        Err(_) => shared.send_errors.fetch_add(1, Ordering::Relaxed),
                    };
                    seq = seq.wrapping_add(1);
                    next += interval;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        };
        Ok(Flow {
            shared,
            threads: vec![sending, receiving],
            name: name.into(),
        })
    }

    pub fn counts(&self) -> FlowCounts {
        FlowCounts {
            sent: self.shared.sent.load(Ordering::Relaxed),
            send_errors: self.shared.send_errors.load(Ordering::Relaxed),
            received: self.shared.received.load(Ordering::Relaxed),
            reader_dropped: self.shared.reader_dropped.load(Ordering::Relaxed),
        }
    }

    /// Waits up to `limit` for `more` frames to arrive beyond what has arrived now.
    pub fn forwards(&self, more: u64, limit: Duration) -> bool {
        let start = self.counts().received;
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.counts().received >= start + more {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Stops sending, lets what is in flight arrive, and returns the final counts.
    pub fn stop(mut self) -> FlowCounts {
        self.finish()
    }

    fn finish(&mut self) -> FlowCounts {
        self.shared.stop_sending.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        let sent = self.shared.sent.load(Ordering::Relaxed);
        let settle = Instant::now() + Duration::from_millis(500);
        while self.shared.received.load(Ordering::Relaxed) < sent && Instant::now() < settle {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.counts()
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.finish();
        }
    }
}
