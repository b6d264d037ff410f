//! What an accept loop does when `accept` fails. The causes that matter (EMFILE, ENFILE,
//! ENOBUFS, ENOMEM) last while the connection waits in the queue, and the socket stays
//! readable, so trying again at once spins a core and writes a log line per try (an
//! attack on the metrics port once made 7.5 million lines in 15 s). The loop waits a
//! little before the next try, and one line per interval says how many failed.

use std::time::{Duration, Instant};

/// How long an accept loop waits after a failure that lasts (running out of descriptors
/// or memory) before it tries again.
pub(crate) const BACKOFF: Duration = Duration::from_millis(100);
/// At most one log line per this, per socket.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// The failures of one socket's accept loop since its last log line.
pub(crate) struct AcceptFailures {
    socket: &'static str,
    unlogged: u64,
    last_line: Option<Instant>,
}

impl AcceptFailures {
    pub fn new(socket: &'static str) -> AcceptFailures {
        AcceptFailures {
            socket,
            unlogged: 0,
            last_line: None,
        }
    }

    /// Counts a failure, logs a line when one is due, and says how long to wait before
    /// accepting again.
    pub fn failed(&mut self, error: &std::io::Error) -> Duration {
        if let Some(count) = self.count(Instant::now()) {
            tracing::warn!(
                failures = count,
                "accept on the {}: {error} (one line per {} s at most)",
                self.socket,
                LOG_EVERY.as_secs()
            );
        }
        wait_after(error)
    }

    /// Counts a failure at `now`; the count to log, if a line is due.
    fn count(&mut self, now: Instant) -> Option<u64> {
        self.unlogged += 1;
        let due = self
            .last_line
            .is_none_or(|last| now.duration_since(last) >= LOG_EVERY);
        if !due {
            return None;
        }
        self.last_line = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

/// A connection the client gave up before it was accepted is gone with its error: the
/// next one may be fine. Anything else is a shortage that a retry at once would hit too.
fn wait_after(error: &std::io::Error) -> Duration {
    use std::io::ErrorKind::*;
    match error.kind() {
        ConnectionAborted | ConnectionReset | Interrupted => Duration::ZERO,
        _ => BACKOFF,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storm_of_failures_makes_one_line_per_interval_with_its_count() {
        let mut failures = AcceptFailures::new("test socket");
        let start = Instant::now();
        let mut lines = Vec::new();
        // Ten thousand failures over 25 s: lines at 0, 10 and 20 s.
        for i in 0..10_000u64 {
            let now = start + Duration::from_micros(i * 2_500);
            if let Some(count) = failures.count(now) {
                lines.push((now.duration_since(start).as_secs(), count));
            }
        }
        assert_eq!(lines, vec![(0, 1), (10, 4000), (20, 4000)]);
    }

    #[test]
    fn shortages_wait_and_aborted_connections_do_not() {
        let emfile = std::io::Error::from_raw_os_error(nix::libc::EMFILE);
        let aborted = std::io::Error::from_raw_os_error(nix::libc::ECONNABORTED);
        assert_eq!(wait_after(&emfile), BACKOFF);
        assert_eq!(wait_after(&aborted), Duration::ZERO);
    }
}
