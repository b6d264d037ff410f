//! Claims refused, by peer, told in few words: a peer's first refusal is logged at once,
//! and what follows within `SUMMARY_EVERY` is counted and said in one line when the
//! interval is over. A peer that sends a hundred thousand bad claims costs a few log
//! lines, not a hundred thousand (an attack run made 1.8 million lines, 200 MB, that
//! way). Pure: the caller says what time it is and logs what it is given.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xwire_proto::control::WireSpec;

use super::claims::Refusal;
use crate::metrics::NodeMetrics;

/// The most a peer's refusals are logged.
pub(super) const SUMMARY_EVERY: Duration = Duration::from_secs(10);
/// Refusals of claims to wires no topology here has that are answered, per peer per
/// interval: the few that a topology change read by one node before the other needs (the
/// claimant joined on news older than the change), not the thousands of a flood.
const UNKNOWN_ANSWERS: u64 = 256;

/// What to log about one peer's refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Summary {
    pub(super) peer: String,
    /// Refusals since the last line (this one's included).
    pub(super) count: u64,
    /// Why the last of them was refused.
    pub(super) last_reason: String,
}

#[derive(Debug)]
struct PeerRefusals {
    unlogged: u64,
    /// Refusals of claims to unknown wires answered in this interval.
    unknown_answered: u64,
    last_reason: String,
    logged_at: Instant,
}

/// The refusals not yet logged, by peer.
#[derive(Debug, Default)]
pub(super) struct Refusals {
    peers: HashMap<String, PeerRefusals>,
}

impl Refusals {
    /// A claim from `peer` was refused for `reason` (made only if it is to be logged).
    /// Returns the line to log now, if one is due.
    pub(super) fn refused(
        &mut self,
        peer: &str,
        now: Instant,
        reason: impl FnOnce() -> String,
    ) -> Option<Summary> {
        match self.peers.get_mut(peer) {
            None => {
                self.peers.insert(
                    peer.to_owned(),
                    PeerRefusals {
                        unlogged: 0,
                        unknown_answered: 0,
                        last_reason: String::new(),
                        logged_at: now,
                    },
                );
                Some(Summary {
                    peer: peer.to_owned(),
                    count: 1,
                    last_reason: reason(),
                })
            }
            Some(seen) => {
                seen.unlogged += 1;
                // The reason of a claim that ends an interval is the one said; the others
                // are not even written out.
                if now.duration_since(seen.logged_at) >= SUMMARY_EVERY {
                    seen.last_reason = reason();
                    return Some(take(peer, seen, now));
                }
                if seen.last_reason.is_empty() {
                    seen.last_reason = reason();
                }
                None
            }
        }
    }

    /// Whether a refusal from `peer` of a claim to a wire no topology here has (counted
    /// with `refused` first) is to be answered: up to `UNKNOWN_ANSWERS` per interval.
    pub(super) fn may_answer_unknown(&mut self, peer: &str) -> bool {
        let Some(seen) = self.peers.get_mut(peer) else {
            return true;
        };
        seen.unknown_answered += 1;
        seen.unknown_answered <= UNKNOWN_ANSWERS
    }

    /// The lines due now for peers whose interval ended with refusals unlogged; a peer
    /// quiet for a whole interval is forgotten (its next refusal is logged at once).
    pub(super) fn due(&mut self, now: Instant) -> Vec<Summary> {
        let mut lines = Vec::new();
        self.peers.retain(|peer, seen| {
            if now.duration_since(seen.logged_at) < SUMMARY_EVERY {
                return true;
            }
            if seen.unlogged == 0 {
                return false;
            }
            lines.push(take(peer, seen, now));
            true
        });
        lines.sort_by(|a, b| a.peer.cmp(&b.peer));
        lines
    }
}

/// Where a refusal is counted: the node's total (its state's `refused_claims`), the
/// metrics by peer, and the log's summaries. The node's thread and the peer desk each
/// have one, on the same total and metrics.
pub(super) struct RefusalBook {
    refusals: Refusals,
    total: Arc<AtomicU64>,
    metrics: Arc<NodeMetrics>,
}

impl RefusalBook {
    pub(super) fn new(total: Arc<AtomicU64>, metrics: Arc<NodeMetrics>) -> RefusalBook {
        RefusalBook {
            refusals: Refusals::default(),
            total,
            metrics,
        }
    }

    /// Counts `from`'s claim `spec`, refused for `refusal`, and says whether to answer it
    /// with DelWire (see `Refusals::may_answer_unknown`).
    pub(super) fn refuse(
        &mut self,
        from: &str,
        refusal: &Refusal,
        spec: &WireSpec,
        now: Instant,
    ) -> bool {
        self.total.fetch_add(1, Ordering::Relaxed);
        self.metrics.refused_claim(from);
        if let Some(line) = self.refusals.refused(from, now, || refusal.describe(spec)) {
            log_refusals(&line);
        }
        !matches!(refusal, Refusal::NoSuchWire) || self.refusals.may_answer_unknown(from)
    }

    /// Logs the summaries due now.
    pub(super) fn log_due(&mut self, now: Instant) {
        for line in self.refusals.due(now) {
            log_refusals(&line);
        }
    }
}

fn log_refusals(line: &Summary) {
    if line.count == 1 {
        tracing::warn!(peer = %line.peer, "claim refused: {}", line.last_reason);
    } else {
        tracing::warn!(
            peer = %line.peer,
            count = line.count,
            "claims refused since the last line: {} (the last: {})",
            line.count,
            line.last_reason
        );
    }
}

fn take(peer: &str, seen: &mut PeerRefusals, now: Instant) -> Summary {
    let summary = Summary {
        peer: peer.to_owned(),
        count: seen.unlogged,
        last_reason: std::mem::take(&mut seen.last_reason),
    };
    seen.unlogged = 0;
    seen.unknown_answered = 0;
    seen.logged_at = now;
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(text: &str) -> impl FnOnce() -> String + '_ {
        move || text.to_owned()
    }

    #[test]
    fn a_peers_first_refusal_is_said_at_once_and_the_rest_once_per_interval() {
        let start = Instant::now();
        let mut refusals = Refusals::default();
        let first = refusals.refused("n3", start, reason("a"));
        assert_eq!(
            first,
            Some(Summary {
                peer: "n3".into(),
                count: 1,
                last_reason: "a".into()
            })
        );
        for i in 1..=1000u64 {
            let at = start + Duration::from_millis(i);
            assert_eq!(refusals.refused("n3", at, reason("b")), None);
        }
        assert_eq!(refusals.due(start + Duration::from_secs(5)), vec![]);
        let at_end = start + SUMMARY_EVERY;
        assert_eq!(
            refusals.due(at_end),
            vec![Summary {
                peer: "n3".into(),
                count: 1000,
                last_reason: "b".into()
            }]
        );
        // A refusal that itself ends an interval says the count with it.
        assert_eq!(refusals.refused("n3", at_end, reason("c")), None);
        let later = at_end + SUMMARY_EVERY;
        assert_eq!(
            refusals.refused("n3", later, reason("d")),
            Some(Summary {
                peer: "n3".into(),
                count: 2,
                last_reason: "d".into()
            })
        );
    }

    #[test]
    fn peers_are_counted_apart_and_a_quiet_one_is_forgotten() {
        let start = Instant::now();
        let mut refusals = Refusals::default();
        assert!(refusals.refused("n3", start, reason("x")).is_some());
        assert!(refusals.refused("n4", start, reason("y")).is_some());
        assert_eq!(refusals.refused("n4", start, reason("z")), None);
        let lines = refusals.due(start + SUMMARY_EVERY);
        assert_eq!(lines.len(), 1);
        assert_eq!((lines[0].peer.as_str(), lines[0].count), ("n4", 1));
        // n3 had nothing more: forgotten, so its next refusal is said at once.
        assert!(refusals
            .refused("n3", start + SUMMARY_EVERY, reason("w"))
            .is_some());
    }

    #[test]
    fn a_reason_is_written_out_only_when_it_will_be_said() {
        let start = Instant::now();
        let mut refusals = Refusals::default();
        refusals.refused("n3", start, reason("first"));
        let mut made = 0;
        for i in 0..100 {
            refusals.refused("n3", start + Duration::from_millis(i), || {
                made += 1;
                "again".into()
            });
        }
        assert_eq!(made, 1, "the reason of one claim per interval is kept");
    }
}
