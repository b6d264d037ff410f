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
    /// AF_XDP (the daemon's choice wherever the kernel offers it), or the AF_PACKET
    /// fallback. Never `Auto` here: a scenario that asked for AF_XDP and quietly got
    /// AF_PACKET would print the wrong kind beside its figures.
    pub ports: PortChoice,
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
            ports: PortChoice::AfXdp,
        }
    }
}

impl WorkerSettings {
    /// A worker on `core` with these settings; everything else is the default.
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
            ports: self.ports,
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
        let ports = match self.ports {
            PortChoice::AfPacket => "AF_PACKET ports (TPACKET_V2 rings)".to_owned(),
            _ => format!(
                "AF_XDP ports of {} to {} UMEM frames by traffic, resting at a share of {} \
                 per worker",
                self.min_frames_per_port.min(self.frames_per_port),
                self.frames_per_port,
                self.resting_frames_per_worker
            ),
        };
        format!(
            "xwire workers {polling}, nice {}, {ports} ({ours})",
            self.nice
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemons_settings_open_af_xdp_ports_and_the_report_says_so() {
        let settings = WorkerSettings::default();
        assert_eq!(settings.config(1).ports, PortChoice::AfXdp);
        let line = settings.describe();
        assert!(line.contains("AF_XDP ports of"), "{line}");
        assert!(line.ends_with("(the daemon's defaults)"), "{line}");
    }

    #[test]
    fn af_packet_ports_reach_the_worker_and_the_report() {
        let settings = WorkerSettings {
            ports: PortChoice::AfPacket,
            ..WorkerSettings::default()
        };
        let config = settings.config(1);
        assert_eq!(config.ports, PortChoice::AfPacket);
        assert_eq!(config.core, Some(1));
        let line = settings.describe();
        assert!(line.contains("AF_PACKET ports"), "{line}");
        assert!(!line.contains("UMEM"), "{line}");
        assert!(line.ends_with("(not the daemon's defaults)"), "{line}");
    }
}
