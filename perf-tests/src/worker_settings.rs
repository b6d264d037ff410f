//! How xwire's workers run in a perf scenario: as `xwired` runs them (the fast path's
//! `WorkerConfig::default()`, which is the daemon's default too) unless a flag says
//! otherwise, and printed beside the figures so that a reader knows which.

use std::time::Duration;

use xwire_fastpath::{PortChoice, WorkerConfig};

/// The worker settings a scenario varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSettings {
    pub busy_poll: bool,
    pub idle_spin: Duration,
    pub coalesce: Duration,
    pub nice: i8,
    pub frames_per_port: usize,
    pub min_frames_per_port: usize,
    pub resting_frames_per_worker: usize,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        let daemon = WorkerConfig::default();
        WorkerSettings {
            busy_poll: daemon.busy_poll,
            idle_spin: daemon.idle_spin,
            coalesce: daemon.coalesce,
            nice: daemon.nice,
            frames_per_port: daemon.frames_per_port,
            min_frames_per_port: daemon.min_frames_per_port,
            resting_frames_per_worker: daemon.resting_frames_per_worker,
        }
    }
}

impl WorkerSettings {
    /// A worker on `core` with AF_XDP ports and these settings; everything else is the
    /// default.
    pub fn config(self, core: usize) -> WorkerConfig {
        WorkerConfig {
            core: Some(core),
            busy_poll: self.busy_poll,
            idle_spin: self.idle_spin,
            coalesce: self.coalesce,
            nice: self.nice,
            frames_per_port: self.frames_per_port,
            min_frames_per_port: self.min_frames_per_port,
            resting_frames_per_worker: self.resting_frames_per_worker,
            ports: PortChoice::AfXdp,
            ..WorkerConfig::default()
        }
    }

    /// One line for the head of a report, saying which settings are the daemon's.
    pub fn describe(self) -> String {
        let polling = if self.busy_poll {
            "busy-polling".to_owned()
        } else {
            let worker = self.config(0);
            let flowing = if worker.coalesce.is_zero() {
                "spins while traffic flows".to_owned()
            } else {
                format!(
                    "naps {} to {} us between passes while traffic flows",
                    worker.coalesce.as_micros(),
                    worker.longest_nap().as_micros()
                )
            };
            format!(
                "adaptive ({flowing}, sleeps after {} us without)",
                self.idle_spin.as_micros()
            )
        };
        let ours = if self == WorkerSettings::default() {
            "the daemon's defaults"
        } else {
            "not the daemon's defaults"
        };
        format!(
            "xwire workers {polling}, nice {}, {} to {} UMEM frames per port by traffic, \
             resting at a share of {} per worker ({ours})",
            self.nice,
            self.min_frames_per_port.min(self.frames_per_port),
            self.frames_per_port,
            self.resting_frames_per_worker
        )
    }
}
