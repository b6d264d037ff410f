//! The search for a wire's loss-free rate, as RFC 2544's throughput test does it: trials at
//! offered rates, each passed or failed by its loss, narrowed to the highest rate that
//! passes, and that rate then confirmed by one long trial. Pure: the caller runs each trial
//! and records what it measured, so the search is tested here without a socket.
//!
//! Two rules keep the figure from following the noise of a shared machine (one run's
//! kernel VXLAN baseline fell to a tenth of its usual rate when one short trial caught a
//! transient):
//! - a short trial that fails is run again at the same rate (`retries`), and the rate
//!   fails only when every try did: one stall does not move the search down for good;
//! - the rate found by short trials is held for a long trial (`confirm_seconds`, 10 s by
//!   default: the loss-free rate's definition is loss within budget over 10 s), and
//!   stepped down each time that fails (`confirmations`): by a step that doubles, and to
//!   at most what the failed long trial carried.

use serde::Serialize;

/// What passes, and when the search stops.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Criteria {
    /// The highest loss a passing trial may have: 0.001 is 0.1%.
    pub max_loss: f64,
    /// Stop once the gap between the highest pass and the lowest failure is at most this
    /// share of the failure's rate.
    pub resolution: f64,
    /// Short trials after the full-rate one, at most (tries again included).
    pub max_trials: usize,
    /// Times a failed short trial is tried again at the same rate before the rate fails.
    pub retries: usize,
    /// The length of the confirming trial, in seconds; 0: the short trials decide.
    pub confirm_seconds: f64,
    /// Confirming trials at most; when every one fails, no rate is loss-free.
    pub confirmations: usize,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            max_loss: 0.001,
            resolution: 0.03,
            max_trials: 10,
            retries: 1,
            confirm_seconds: 10.0,
            confirmations: 4,
        }
    }
}

/// After a failure with no pass yet, the next rate is this share of the failed one: a
/// geometric walk down finds a passing rate in a few trials even when the first guess is
/// far off (a wire whose loss grows with a queue that fills).
const STEP_DOWN: f64 = 0.7;

/// The next trial: its rate in frames per second, and whether it is the long one that
/// confirms the rate (`Criteria::confirm_seconds`) or a short one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub rate: u64,
    pub confirm: bool,
}

/// The search's state. `T` is what a trial measured (kept for the passes, and returned
/// with the rate found).
#[derive(Debug, Clone)]
pub(crate) struct Search<T> {
    criteria: Criteria,
    /// Short trials that passed, by rate; those at or above a failed confirmation go.
    passes: Vec<(u64, T)>,
    /// The lowest rate that failed (every try of a short trial, or a confirmation).
    failed: u64,
    trials: usize,
    /// Tries of the current rate that failed so far.
    failed_tries: usize,
    confirmations: usize,
    /// What the search found: a confirmed pass, or (with no confirmation asked) the
    /// highest short pass.
    found: Option<(u64, T)>,
    next: Option<Step>,
}

impl<T> Search<T> {
    /// Starts from the full-rate trial: what was offered, what got through, and the
    /// measurement. A full-rate trial within the loss budget goes to the confirmation at
    /// once (or ends the search, with no confirmation asked).
    pub(crate) fn from_peak(
        offered_pps: f64,
        delivered_pps: f64,
        loss: f64,
        peak: T,
        criteria: Criteria,
    ) -> Search<T> {
        let offered = offered_pps.max(0.0) as u64;
        let mut search = Search {
            criteria,
            passes: Vec::new(),
            failed: offered,
            trials: 0,
            failed_tries: 0,
            confirmations: 0,
            found: None,
            next: None,
        };
        if loss <= criteria.max_loss {
            // The generator's own limit, not the wire's: nothing failed.
            search.failed = u64::MAX;
            search.passes.push((offered, peak));
            search.next = search.converged();
            return search;
        }
        // What got through at full rate is the best first guess: a little below it, the
        // queues that overflowed at full rate drain.
        let first = ((delivered_pps * 0.98) as u64).min(offered.saturating_sub(1));
        search.next = (first > 0).then_some(Step {
            rate: first,
            confirm: false,
        });
        search
    }

    /// The next trial, or `None` when the search is over.
    pub(crate) fn next_step(&self) -> Option<Step> {
        self.next
    }

    /// Records what the trial of `step` (the one `next_step` gave) lost and measured, and
    /// picks the next.
    pub fn record(&mut self, step: Step, loss: f64, measured: T) {
        let pass = loss <= self.criteria.max_loss;
        if step.confirm {
            self.confirmations += 1;
            if pass {
                self.found = Some((step.rate, measured));
                self.next = None;
                return;
            }
            self.failed = self.failed.min(step.rate);
            self.passes.retain(|(rate, _)| *rate < step.rate);
            // What the long trial carried bounds the next one too: short trials that were
            // lucky far above the wire's rate are left at once, not in steps.
            let carried = (step.rate as f64 * (1.0 - loss.clamp(0.0, 1.0)) * 0.98) as u64;
            self.next = self.confirm_lower(step.rate).and_then(|next| {
                let rate = next.rate.min(carried);
                (rate > 0).then_some(Step { rate, ..next })
            });
            return;
        }
        self.trials += 1;
        if pass {
            self.failed_tries = 0;
            self.passes.push((step.rate, measured));
        } else {
            self.failed_tries += 1;
            if self.failed_tries <= self.criteria.retries && self.trials < self.criteria.max_trials
            {
                self.next = Some(step);
                return;
            }
            self.failed_tries = 0;
            self.failed = self.failed.min(step.rate);
        }
        self.next = self.choose_next();
    }

    fn best_pass(&self) -> Option<u64> {
        self.passes.iter().map(|(rate, _)| *rate).max()
    }

    fn choose_next(&mut self) -> Option<Step> {
        let short = |rate: u64| {
            (rate > 0).then_some(Step {
                rate,
                confirm: false,
            })
        };
        let budget_left = self.trials < self.criteria.max_trials;
        let Some(low) = self.best_pass() else {
            return if budget_left {
                short((self.failed as f64 * STEP_DOWN) as u64)
            } else {
                None
            };
        };
        // A pass at or above the lowest failure is noise: the pass stands. So does the
        // highest pass when the budget is spent or the gap is within the resolution.
        let gap = self.failed.saturating_sub(low) as f64;
        if low >= self.failed
            || !budget_left
            || gap <= self.criteria.resolution * self.failed as f64
        {
            return self.converged();
        }
        short(low + (self.failed - low) / 2)
    }

    /// The short trials are done: confirm their highest pass, or take it as found.
    fn converged(&mut self) -> Option<Step> {
        let best = self.best_pass()?;
        if self.criteria.confirm_seconds <= 0.0 || self.criteria.confirmations == 0 {
            let index = (self.passes.iter()).position(|(rate, _)| *rate == best)?;
            self.found = Some(self.passes.swap_remove(index));
            return None;
        }
        Some(Step {
            rate: best,
            confirm: true,
        })
    }

    /// A confirmation at `rate` failed: the next one is lower by twice the resolution,
    /// then by twice that, and so on (6%, 12%, 24% of the rate by default), or at the
    /// highest short pass left when that is lower still (and at most what the failed
    /// trial carried, `record`), while confirmations are left.
    /// The steps grow so that a wire whose short trials were lucky still gets a figure.
    fn confirm_lower(&self, rate: u64) -> Option<Step> {
        if self.confirmations >= self.criteria.confirmations {
            return None;
        }
        let exponent = i32::try_from(self.confirmations - 1).unwrap_or(i32::MAX);
        let cut = (2.0 * self.criteria.resolution * 2f64.powi(exponent)).min(0.5);
        let stepped = (rate as f64 * (1.0 - cut)) as u64;
        let rate = self.best_pass().map_or(stepped, |pass| pass.min(stepped));
        (rate > 0).then_some(Step {
            rate,
            confirm: true,
        })
    }

    /// The lowest rate that failed, if any did: where a search that found nothing gave
    /// up, so that a report can say "below this" rather than "nothing".
    pub fn lowest_failure(&self) -> Option<u64> {
        (self.failed != u64::MAX).then_some(self.failed)
    }

    /// Trials run after the full-rate one: short ones, tries again and confirmations.
    pub fn trials(&self) -> usize {
        self.trials + self.confirmations
    }

    /// The loss-free rate and the measurement of the trial that showed it (the
    /// confirming one, when asked for); `None` when no rate passed.
    pub fn finish(self) -> Option<(u64, T)> {
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wire that carries up to `capacity` frames per second and drops the rest.
    fn loss_at(capacity: f64, rate: u64) -> f64 {
        (1.0 - capacity / rate as f64).max(0.0)
    }

    fn short_only() -> Criteria {
        Criteria {
            confirm_seconds: 0.0,
            retries: 0,
            ..Criteria::default()
        }
    }

    /// Runs a search against `loss(step)`; returns the rate found, the trials and steps.
    fn search_with(
        peak: (f64, f64, f64),
        criteria: Criteria,
        mut loss: impl FnMut(Step) -> f64,
    ) -> (Option<u64>, usize, Vec<Step>) {
        let mut search = Search::from_peak(peak.0, peak.1, peak.2, (), criteria);
        let mut steps = Vec::new();
        while let Some(step) = search.next_step() {
            assert!(steps.len() < 100, "the search does not end: {steps:?}");
            steps.push(step);
            search.record(step, loss(step), ());
        }
        let trials = search.trials();
        (search.finish().map(|(rate, ())| rate), trials, steps)
    }

    fn run(capacity: f64, peak_offered: f64, criteria: Criteria) -> (Option<u64>, usize) {
        let peak_loss = loss_at(capacity, peak_offered as u64);
        let delivered = peak_offered * (1.0 - peak_loss);
        let (found, trials, _) = search_with((peak_offered, delivered, peak_loss), criteria, |s| {
            loss_at(capacity, s.rate)
        });
        (found, trials)
    }

    #[test]
    fn a_wire_that_carries_the_full_rate_needs_only_the_confirmation() {
        assert_eq!(run(2e6, 1e6, short_only()), (Some(1_000_000), 0));
        assert_eq!(run(2e6, 1e6, Criteria::default()), (Some(1_000_000), 1));
    }

    #[test]
    fn the_search_ends_within_the_resolution_below_the_capacity() {
        for criteria in [short_only(), Criteria::default()] {
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
                assert!(trials <= criteria.max_trials + criteria.confirmations);
            }
        }
    }

    #[test]
    fn a_first_guess_that_fails_walks_down_until_one_passes() {
        // The wire loses frames far below what it delivered at full rate: a queue that
        // drops in bursts. The walk down still finds a pass.
        let (found, _, steps) =
            search_with((1e6, 5e5, 0.5), short_only(), |s| loss_at(1e5, s.rate));
        let rates: Vec<u64> = steps.iter().map(|s| s.rate).collect();
        assert_eq!(rates[0], 490_000);
        assert!(rates[1] < rates[0] && rates[2] < rates[1], "{rates:?}");
        let found = found.expect("a rate passes");
        assert!((70_000..=100_100).contains(&found), "{found}");
    }

    #[test]
    fn a_search_that_finds_nothing_says_the_lowest_rate_it_tried() {
        // Every confirmation fails: the short trials pass, the long ones lose 1%.
        let mut search = Search::from_peak(1e6, 9e5, 0.1, (), Criteria::default());
        let mut lowest = u64::MAX;
        while let Some(step) = search.next_step() {
            assert!(search.trials() < 100, "the search does not end");
            lowest = lowest.min(step.rate);
            search.record(step, if step.confirm { 0.01 } else { 0.0 }, ());
        }
        assert_eq!(search.lowest_failure(), Some(lowest));
        assert!(search.finish().is_none());
        // A full-rate trial within the budget failed nowhere.
        let clean = Search::from_peak(1e6, 1e6, 0.0, (), Criteria::default());
        assert_eq!(clean.lowest_failure(), None);
    }

    #[test]
    fn no_pass_within_the_trials_finds_nothing() {
        let criteria = Criteria {
            max_trials: 3,
            ..Criteria::default()
        };
        let (found, trials, steps) = search_with((1e6, 9e5, 0.1), criteria, |_| 0.5);
        assert_eq!(trials, 3);
        assert!(steps.iter().all(|s| !s.confirm), "{steps:?}");
        assert!(found.is_none());
    }

    #[test]
    fn a_noisy_pass_above_a_failure_keeps_the_pass_and_stops() {
        let mut search = Search::from_peak(1e6, 5e5, 0.5, "peak", short_only());
        let short = |rate| Step {
            rate,
            confirm: false,
        };
        search.record(short(490_000), 0.01, "fail");
        search.record(short(343_000), 0.0, "pass");
        assert!(search.next_step().is_some());
        search.record(short(416_500), 0.0, "higher pass");
        search.record(short(453_250), 0.0, "higher still");
        search.record(short(471_625), 0.0, "near the failure");
        // A later pass above the lowest failure (noise): the search stops, highest pass stands.
        search.record(short(500_000), 0.0, "noise");
        assert_eq!(search.next_step(), None);
        assert_eq!(search.finish(), Some((500_000, "noise")));
    }

    #[test]
    fn one_stall_in_a_short_trial_does_not_move_the_search_down_for_good() {
        // A wire that carries 400 kpps; the first trial at 392 kpps meets a stall of the
        // machine and loses 2%. Without a second try the search would stay below it.
        let mut stalled = false;
        let criteria = Criteria {
            confirm_seconds: 0.0,
            ..Criteria::default()
        };
        let (found, _, steps) = search_with((1e6, 4e5, 0.6), criteria, |s| {
            if !stalled {
                stalled = true;
                return 0.02;
            }
            loss_at(4e5, s.rate)
        });
        assert_eq!(
            steps[0], steps[1],
            "the failed rate is tried again: {steps:?}"
        );
        assert_eq!(found, Some(392_000));
        let (without, _, _) = search_with((1e6, 4e5, 0.6), short_only(), |s| {
            if s.rate == 392_000 {
                0.02
            } else {
                loss_at(4e5, s.rate)
            }
        });
        assert!(without.unwrap() < 392_000, "{without:?}");
    }

    #[test]
    fn a_rate_that_fails_its_long_trial_is_confirmed_lower() {
        // Short trials pass up to 300 kpps; held for the long trial, only 270 kpps does:
        // the first confirmation fails, and the second, at what the first carried (below
        // the 6% step), holds.
        let (found, trials, steps) = search_with((1e6, 3e5, 0.7), Criteria::default(), |s| {
            let capacity = if s.confirm { 2.7e5 } else { 3e5 };
            loss_at(capacity, s.rate)
        });
        let confirms: Vec<u64> = (steps.iter())
            .filter(|s| s.confirm)
            .map(|s| s.rate)
            .collect();
        assert_eq!(confirms.len(), 2, "{steps:?}");
        assert!(confirms[1] < confirms[0], "{confirms:?}");
        let found = found.expect("a lower rate is confirmed");
        assert_eq!(found, confirms[1]);
        assert!((250_000..=270_270).contains(&found), "{found}");
        assert_eq!(trials, steps.len());
    }

    #[test]
    fn short_trials_that_were_lucky_far_above_the_wires_rate_are_left_at_once() {
        // Every short trial passes (a burst the queues took), but held for the long
        // trial the wire carries only 180 kpps: the next long trial goes to what the
        // failed one carried, not 6% lower.
        let (found, _, steps) = search_with((4e5, 3e5, 0.25), Criteria::default(), |s| {
            if s.confirm {
                loss_at(1.8e5, s.rate)
            } else {
                0.0
            }
        });
        let confirms: Vec<u64> = (steps.iter())
            .filter(|s| s.confirm)
            .map(|s| s.rate)
            .collect();
        assert_eq!(confirms.len(), 2, "{steps:?}");
        let found = found.expect("the second long trial holds");
        assert!((170_000..=180_000).contains(&found), "{found}");
    }

    #[test]
    fn a_wire_that_never_holds_a_rate_for_the_long_trial_has_no_loss_free_rate() {
        let (found, _, steps) = search_with((1e6, 3e5, 0.7), Criteria::default(), |s| {
            if s.confirm {
                0.01
            } else {
                loss_at(3e5, s.rate)
            }
        });
        let confirms = steps.iter().filter(|s| s.confirm).count();
        assert_eq!(confirms, Criteria::default().confirmations);
        assert_eq!(found, None);
    }

    #[test]
    fn the_measurement_returned_is_the_confirming_trials() {
        let mut search = Search::from_peak(1e5, 1e5, 0.0, "peak", Criteria::default());
        let step = search.next_step().expect("a confirmation");
        assert!(step.confirm);
        assert_eq!(step.rate, 100_000);
        search.record(step, 0.0, "long");
        assert_eq!(search.next_step(), None);
        assert_eq!(search.finish(), Some((100_000, "long")));
    }
}
