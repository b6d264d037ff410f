//! The search for a wire's loss-free rate, as RFC 2544's throughput test does it: trials at
//! offered rates, each passed or failed by its loss, narrowed to the highest rate that
//! passes. Pure: the caller runs each trial and records what it measured, so the search
//! is tested here without a socket.

use serde::Serialize;

/// What passes, and when the search stops.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Criteria {
    /// The highest loss a passing trial may have: 0.001 is 0.1%.
    pub max_loss: f64,
    /// Stop once the gap between the highest pass and the lowest failure is at most this
    /// share of the failure's rate.
    pub resolution: f64,
    /// Trials after the full-rate one, at most.
    pub max_trials: usize,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            max_loss: 0.001,
            resolution: 0.03,
            max_trials: 8,
        }
    }
}

/// After a failure with no pass yet, the next rate is this share of the failed one: a
/// geometric walk down finds a passing rate in a few trials even when the first guess is
/// far off (a wire whose loss grows with a queue that fills).
const STEP_DOWN: f64 = 0.7;

/// The search's state: the highest passing and lowest failing rate so far, in frames per
/// second. `T` is what a trial measured (kept for the best pass).
#[derive(Debug, Clone)]
pub struct Search<T> {
    criteria: Criteria,
    passed: Option<(u64, T)>,
    failed: u64,
    trials: usize,
    next: Option<u64>,
}

impl<T> Search<T> {
    /// Starts from the full-rate trial: what was offered, what got through, and the
    /// measurement. A full-rate trial within the loss budget ends the search at once.
    pub fn from_peak(
        offered_pps: f64,
        delivered_pps: f64,
        loss: f64,
        peak: T,
        criteria: Criteria,
    ) -> Search<T> {
        let offered = offered_pps.max(0.0) as u64;
        if loss <= criteria.max_loss {
            return Search {
                criteria,
                passed: Some((offered, peak)),
                failed: offered,
                trials: 0,
                next: None,
            };
        }
        // What got through at full rate is the best first guess: a little below it, the
        // queues that overflowed at full rate drain.
        let first = ((delivered_pps * 0.98) as u64).min(offered.saturating_sub(1));
        Search {
            criteria,
            passed: None,
            failed: offered,
            trials: 0,
            next: (first > 0).then_some(first),
        }
    }

    /// The rate of the next trial, or `None` when the search is over.
    pub fn next_rate(&self) -> Option<u64> {
        self.next
    }

    /// Records a trial at `rate` with `loss`, and picks the next rate.
    pub fn record(&mut self, rate: u64, loss: f64, measured: T) {
        self.trials += 1;
        let pass = loss <= self.criteria.max_loss;
        if pass {
            if self.passed.as_ref().is_none_or(|(best, _)| rate > *best) {
                self.passed = Some((rate, measured));
            }
        } else {
            self.failed = self.failed.min(rate);
        }
        self.next = self.choose_next();
    }

    fn choose_next(&self) -> Option<u64> {
        if self.trials >= self.criteria.max_trials {
            return None;
        }
        let low = match &self.passed {
            Some((rate, _)) => *rate,
            None => {
                let down = (self.failed as f64 * STEP_DOWN) as u64;
                return (down > 0).then_some(down);
            }
        };
        if low >= self.failed {
            // A pass at or above the lowest failure: noise. The pass stands.
            return None;
        }
        let gap = (self.failed - low) as f64;
        if gap <= self.criteria.resolution * self.failed as f64 {
            return None;
        }
        Some(low + (self.failed - low) / 2)
    }

    /// Trials run after the full-rate one.
    pub fn trials(&self) -> usize {
        self.trials
    }

    /// The highest passing rate and its measurement; `None` when no trial passed.
    pub fn finish(self) -> Option<(u64, T)> {
        self.passed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wire that carries up to `capacity` frames per second and drops the rest.
    fn loss_at(capacity: f64, rate: u64) -> f64 {
        (1.0 - capacity / rate as f64).max(0.0)
    }

    fn run(capacity: f64, peak_offered: f64, criteria: Criteria) -> (Option<u64>, usize) {
        let peak_loss = loss_at(capacity, peak_offered as u64);
        let delivered = peak_offered * (1.0 - peak_loss);
        let mut search = Search::from_peak(peak_offered, delivered, peak_loss, (), criteria);
        while let Some(rate) = search.next_rate() {
            search.record(rate, loss_at(capacity, rate), ());
        }
        let trials = search.trials();
        (search.finish().map(|(rate, ())| rate), trials)
    }

    #[test]
    fn a_wire_that_carries_the_full_rate_needs_no_further_trial() {
        assert_eq!(run(2e6, 1e6, Criteria::default()), (Some(1_000_000), 0));
    }

    #[test]
    fn the_search_ends_within_the_resolution_below_the_capacity() {
        let criteria = Criteria::default();
        for capacity in [1e4, 3.3e5, 8e5, 2.5e6] {
            let (found, trials) = run(capacity, capacity * 3.0, criteria);
            let found = found.expect("a rate passes") as f64;
            // Loss at most 0.1% means a rate up to capacity / 0.999 passes.
            assert!(
                found <= capacity / (1.0 - criteria.max_loss) + 1.0,
                "{found} > {capacity}"
            );
            assert!(
                found >= capacity * (1.0 - criteria.resolution) * 0.99,
                "{found} for {capacity}"
            );
            assert!(trials <= criteria.max_trials);
        }
    }

    #[test]
    fn a_first_guess_that_fails_walks_down_until_one_passes() {
        // The wire loses frames far below what it delivered at full rate: a queue that
        // drops in bursts. The walk down still finds a pass.
        let mut search = Search::from_peak(1e6, 5e5, 0.5, (), Criteria::default());
        let mut rates = Vec::new();
        while let Some(rate) = search.next_rate() {
            rates.push(rate);
            search.record(rate, loss_at(1e5, rate), ());
        }
        assert_eq!(rates[0], 490_000);
        assert!(rates[1] < rates[0] && rates[2] < rates[1], "{rates:?}");
        let (found, ()) = search.finish().expect("a rate passes");
        assert!((70_000..=100_100).contains(&found), "{found}");
    }

    #[test]
    fn no_pass_within_the_trials_finds_nothing() {
        let criteria = Criteria {
            max_trials: 3,
            ..Criteria::default()
        };
        let mut search = Search::from_peak(1e6, 9e5, 0.1, (), criteria);
        while let Some(rate) = search.next_rate() {
            search.record(rate, 0.5, ());
        }
        assert_eq!(search.trials(), 3);
        assert!(search.finish().is_none());
    }

    #[test]
    fn a_noisy_pass_above_a_failure_keeps_the_pass_and_stops() {
        let mut search = Search::from_peak(1e6, 5e5, 0.5, "peak", Criteria::default());
        search.record(490_000, 0.01, "fail");
        search.record(343_000, 0.0, "pass");
        assert!(search.next_rate().is_some());
        search.record(416_500, 0.0, "higher pass");
        search.record(453_250, 0.0, "higher still");
        search.record(471_625, 0.0, "near the failure");
        // A later pass above the lowest failure (noise): the search stops, highest pass stands.
        search.record(500_000, 0.0, "noise");
        assert_eq!(search.next_rate(), None);
        assert_eq!(search.finish(), Some((500_000, "noise")));
    }
}
