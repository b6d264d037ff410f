//! Which refused handshakes are worth a warning. Every refusal is counted
//! (`handshakes_refused`); this decides only what the log says.
//!
//! Two nodes that learn of each other at different moments (a lab's daemons starting
//! together, a cluster's nodes reading the API server at different times) refuse each
//! other's first handshake as "not a peer's address", and QUIC's resend of it, a second
//! or two later, is answered once the peer is declared. That is not news. What is: an
//! address still being refused after `GRACE` (a node that nobody declared here, or
//! someone else), more such addresses at once than are tracked, and a refusal for any
//! other reason (too many handshakes). A plain decision on plain data; the endpoint logs.

use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long an address may be refused as no peer's before that is worth a warning: the
/// time two nodes may take to declare each other, with QUIC's resends (about 1, 3 and 7 s
/// after the first Initial) inside it.
const GRACE: Duration = Duration::from_secs(10);
/// Addresses refused as no peer's that are remembered at once. A refusal from one more
/// is warned of at once: that many strangers are not two nodes starting together.
const TRACKED: usize = 16;
/// How often a warning is logged at most (it carries the count since the last one).
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Why a handshake was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The address is no configured peer's.
    NotAPeer,
    /// `MAX_HANDSHAKES` are in progress, one from this address among them.
    TooManyHandshakes,
    /// `MAX_HANDSHAKES_PER_ADDRESS` are in progress from this address.
    TooManyFromAddress,
}

impl Refusal {
    /// What the log says.
    pub(super) fn reason(self) -> &'static str {
        match self {
            Refusal::NotAPeer => "not a peer's address",
            Refusal::TooManyHandshakes => "too many handshakes in progress",
            Refusal::TooManyFromAddress => "too many handshakes in progress from its address",
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Refusals {
    /// Refusals since the last warning.
    unwarned: u64,
    last_warning: Option<Instant>,
    /// Addresses refused as no peer's: when each was refused first and last.
    strangers: Vec<Stranger>,
}

#[derive(Debug)]
struct Stranger {
    ip: IpAddr,
    first: Instant,
    last: Instant,
}

impl Refusals {
    /// Notes a handshake from `ip` refused at `now`. Some(refusals since the last
    /// warning, this one included) when this one is to be warned of; None when it is
    /// logged at debug only.
    pub(super) fn note(&mut self, ip: IpAddr, refusal: Refusal, now: Instant) -> Option<u64> {
        self.unwarned += 1;
        let noteworthy = match refusal {
            Refusal::NotAPeer => self.stranger_noteworthy(ip, now),
            Refusal::TooManyHandshakes | Refusal::TooManyFromAddress => true,
        };
        if !noteworthy
            || self
                .last_warning
                .is_some_and(|last| now.saturating_duration_since(last) < WARN_EVERY)
        {
            return None;
        }
        self.last_warning = Some(now);
        Some(std::mem::take(&mut self.unwarned))
    }

    fn stranger_noteworthy(&mut self, ip: IpAddr, now: Instant) -> bool {
        // An address that stopped trying for a grace is forgotten: its next refusal is a
        // first one again.
        self.strangers
            .retain(|s| now.saturating_duration_since(s.last) < GRACE);
        if let Some(known) = self.strangers.iter_mut().find(|s| s.ip == ip) {
            known.last = now;
            return now.saturating_duration_since(known.first) >= GRACE;
        }
        if self.strangers.len() >= TRACKED {
            return true;
        }
        self.strangers.push(Stranger {
            ip,
            first: now,
            last: now,
        });
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn a_node_refused_until_its_peer_declares_it_is_no_warning() {
        let mut refusals = Refusals::default();
        let start = Instant::now();
        // The first Initial and QUIC's resends of it.
        for after in [0, 1, 3, 7] {
            let at = start + Duration::from_secs(after);
            assert_eq!(
                refusals.note(ip(1), Refusal::NotAPeer, at),
                None,
                "at {after} s"
            );
        }
    }

    #[test]
    fn an_address_still_refused_after_the_grace_is_warned_of_with_the_count() {
        let mut refusals = Refusals::default();
        let start = Instant::now();
        for after in [0, 3, 6, 9] {
            let at = start + Duration::from_secs(after);
            assert_eq!(refusals.note(ip(1), Refusal::NotAPeer, at), None);
        }
        assert_eq!(
            refusals.note(ip(1), Refusal::NotAPeer, start + GRACE),
            Some(5)
        );
        // Then at most once per WARN_EVERY, with what came between.
        let soon = start + GRACE + Duration::from_secs(1);
        assert_eq!(refusals.note(ip(1), Refusal::NotAPeer, soon), None);
        let later = start + GRACE + WARN_EVERY;
        assert_eq!(refusals.note(ip(1), Refusal::NotAPeer, later), Some(2));
    }

    #[test]
    fn an_address_that_stopped_trying_starts_a_new_grace() {
        let mut refusals = Refusals::default();
        let start = Instant::now();
        assert_eq!(refusals.note(ip(1), Refusal::NotAPeer, start), None);
        let much_later = start + GRACE * 3;
        assert_eq!(refusals.note(ip(1), Refusal::NotAPeer, much_later), None);
    }

    #[test]
    fn more_strangers_than_are_tracked_are_warned_of_at_once() {
        let mut refusals = Refusals::default();
        let now = Instant::now();
        for last in 0..TRACKED {
            assert_eq!(refusals.note(ip(last as u8), Refusal::NotAPeer, now), None);
        }
        let refused = TRACKED as u64 + 1;
        assert_eq!(
            refusals.note(ip(200), Refusal::NotAPeer, now),
            Some(refused)
        );
    }

    #[test]
    fn a_refusal_for_another_reason_is_warned_of_at_once() {
        let mut refusals = Refusals::default();
        let now = Instant::now();
        assert_eq!(
            refusals.note(ip(1), Refusal::TooManyHandshakes, now),
            Some(1)
        );
    }
}
