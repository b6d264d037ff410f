//! How many UMEM frames an AF_XDP port should have: a pure decision from the traffic the
//! port carried (received, and was given to send), which `resize.rs` carries out.
//!
//! A port's frames are pinned memory for as long as it is open, and most of them wait in
//! its fill ring for what arrives while the worker is not looking; the kernel has nowhere
//! else to put a frame, so a burst longer than the fill ring is lost. How long a burst
//! can be is a matter of rate: the kernel's own path (a veth into a bridge, VXLAN)
//! queues up to `netdev_max_backlog`, 1000 frames, which at 50 kpps is 20 ms. Measured
//! with `xwire-perf remote-wire` at 50 kpps, a generator held off its CPU for a few
//! milliseconds sent 600 to 800 frames at once on catching up, and a port of 256 frames
//! lost a third of them. A lab, though, has thousands of wire ends, most of them idle.
//! So a port rests at a size its worker can afford for every port it has, and is sized to
//! what it carried: `ABSORB` of its rate, between the floor and the ceiling; a fill ring
//! that ran low, or empty, since the last look grows it four times; and a port whose need
//! has stayed below a quarter of its size for `shrink_after` gives back what it holds
//! above its resting size.
//!
//! The resting size is the worker's budget of resting frames shared among its ports (a
//! power of two, between the floor and the ceiling). A port opened at the floor met a new
//! flow's first burst with 92 frames of fill ring before any look could grow it, and lost
//! most of it (`remote-wire` at 50 kpps, 1514 B: 29 to 1,970 frames in most 10-s runs). A
//! small lab's few ports now rest at thousands of frames and take such a burst whole,
//! while a lab of thousands of wire ends rests each at the floor, as before: what the
//! resting ports pin stays within the budget plus the floor of each.
//!
//! The worker looks at every port each `LOOK_EVERY`, and at a port it takes frames from
//! as soon as `outgrown` says that port's traffic already asks for more (once
//! `EARLIEST_LOOK` of that traffic has come since its last look). With looks only on the
//! round, a port at the floor carried a new flow for up to a round at 92 frames of fill
//! ring, and the first look, over a round that the flow had filled only in part, sized it
//! for a fraction of the flow's rate: `remote-wire` at 50 kpps lost 140 to 1,226 frames
//! per run, every one in that first tenth of a second, to a generator catching up on 300
//! to 1,500 frames.

use std::time::Duration;

/// The stretch of a port's traffic its fill ring holds: what the kernel's backlog holds
/// at 50 kpps (see above).
pub(super) const ABSORB: Duration = Duration::from_millis(20);
/// How often the worker looks at its ports' traffic.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(100);
/// The soonest a port is looked at again because of its traffic: long enough that its
/// rate over the stretch means something (500 frames at 50 kpps).
pub(super) const EARLIEST_LOOK: Duration = Duration::from_millis(10);
/// A fill ring that fell below this share of its target between two looks grows.
const LOW_WATER: usize = 4;
/// How many times larger a port grows when its fill ring ran low.
const GROWTH: usize = 4;

/// The sizes a worker's ports may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    floor: usize,
    ceiling: usize,
    /// The frames the worker's resting ports share (`resting`).
    budget: usize,
    shrink_after: Duration,
}

impl Limits {
    /// A floor above the ceiling is the ceiling: a port never has more than asked.
    pub(super) fn new(
        floor: usize,
        ceiling: usize,
        budget: usize,
        shrink_after: Duration,
    ) -> Limits {
        Limits {
            floor: floor.min(ceiling),
            ceiling,
            budget,
            shrink_after,
        }
    }

    /// The size each of a worker's `ports` opens with and shrinks back to: its share of
    /// the budget, rounded down to a power of two, between the floor and the ceiling.
    pub(super) fn resting(&self, ports: usize) -> usize {
        let share = self.budget / ports.max(1);
        clamp(share.checked_ilog2().map_or(0, |bits| 1 << bits), *self)
    }
}

/// What a port showed since the last look.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Traffic {
    /// Its UMEM frames now.
    pub(super) frames: usize,
    /// Descriptors it received, and frames it was given to send, per second.
    pub(super) rate: f64,
    /// The lowest its fill ring went, and what it is kept topped up to.
    pub(super) lowest_fill: usize,
    pub(super) fill_target: usize,
    /// The kernel found the fill ring empty (and dropped a frame).
    pub(super) ran_empty: bool,
    /// How long it has needed less than a quarter of its frames.
    pub(super) calm_for: Duration,
}

/// What the look decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Look {
    /// The size to move to, if not the current one.
    pub(super) resize: Option<usize>,
    /// Whether the port needs less than a quarter of its frames (the calm clock runs).
    pub(super) calm: bool,
}

/// The frames a port of this traffic needs, within `limits`.
pub(super) fn needed(rate: f64, limits: Limits) -> usize {
    let frames = (rate * ABSORB.as_secs_f64()).ceil() as usize;
    clamp(frames.next_power_of_two(), limits)
}

fn clamp(frames: usize, limits: Limits) -> usize {
    frames.clamp(limits.floor, limits.ceiling)
}

/// Whether a port that carried `carried` frames (received and to send) over `elapsed`,
/// and whose fill ring went as low as `lowest_fill` of `fill_target`, needs more than its
/// `frames` now: a look need not wait for the round.
pub(super) fn outgrown(
    carried: u64,
    elapsed: Duration,
    frames: usize,
    (lowest_fill, fill_target): (usize, usize),
    limits: Limits,
) -> bool {
    if frames >= limits.ceiling || elapsed < EARLIEST_LOOK {
        return false;
    }
    let ran_low = lowest_fill * LOW_WATER < fill_target;
    // `needed(rate) > frames`, without a division: frames for ABSORB of this rate.
    let wanted = carried as u128 * ABSORB.as_nanos();
    ran_low || wanted > frames as u128 * elapsed.as_nanos()
}

/// What a look at a port's `traffic` decides, its worker's ports resting at `resting`
/// frames. A port below its resting size (opened when the worker had more ports) is not
/// grown to it: only traffic grows a port, so a lab going down does not resize the ports
/// it has yet to close.
pub(super) fn look(traffic: Traffic, limits: Limits, resting: usize) -> Look {
    let mut want = needed(traffic.rate, limits);
    let ran_low = traffic.ran_empty || traffic.lowest_fill * LOW_WATER < traffic.fill_target;
    if ran_low {
        want = want.max(clamp(traffic.frames.saturating_mul(GROWTH), limits));
    }
    let calm = !ran_low && want * 4 <= traffic.frames;
    let grow = want > traffic.frames;
    let rest = want.max(resting);
    let shrink = calm && traffic.calm_for >= limits.shrink_after && rest < traffic.frames;
    let resize = if grow {
        Some(want)
    } else {
        shrink.then_some(rest)
    };
    Look { resize, calm }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        floor: 128,
        ceiling: 4096,
        budget: 0,
        shrink_after: Duration::from_secs(30),
    };
    const FLOOR: usize = 128;

    fn idle(frames: usize) -> Traffic {
        Traffic {
            frames,
            rate: 0.0,
            lowest_fill: 100,
            fill_target: 100,
            ran_empty: false,
            calm_for: Duration::ZERO,
        }
    }

    #[test]
    fn a_port_is_sized_to_twenty_milliseconds_of_its_rate_within_the_limits() {
        assert_eq!(needed(0.0, LIMITS), 128);
        assert_eq!(needed(5_000.0, LIMITS), 128);
        assert_eq!(needed(50_000.0, LIMITS), 1024);
        assert_eq!(needed(51_300.0, LIMITS), 2048);
        assert_eq!(needed(3_000_000.0, LIMITS), 4096);
    }

    #[test]
    fn traffic_grows_a_small_port_at_once() {
        let look = look(
            Traffic {
                rate: 50_000.0,
                ..idle(128)
            },
            LIMITS,
            FLOOR,
        );
        assert_eq!(look.resize, Some(1024));
        assert!(!look.calm);
    }

    #[test]
    fn a_fill_ring_that_ran_low_or_empty_grows_the_port_fourfold_up_to_the_ceiling() {
        let low = Traffic {
            lowest_fill: 20,
            ..idle(256)
        };
        assert_eq!(look(low, LIMITS, FLOOR).resize, Some(1024));
        let empty = Traffic {
            ran_empty: true,
            ..idle(2048)
        };
        assert_eq!(look(empty, LIMITS, FLOOR).resize, Some(4096));
        let at_ceiling = Traffic {
            ran_empty: true,
            ..idle(4096)
        };
        assert_eq!(look(at_ceiling, LIMITS, FLOOR).resize, None);
    }

    #[test]
    fn a_port_shrinks_only_after_it_has_been_calm_long_enough() {
        let busy_once = idle(2048);
        let look_now = look(busy_once, LIMITS, FLOOR);
        assert_eq!(
            look_now,
            Look {
                resize: None,
                calm: true
            }
        );
        let later = Traffic {
            calm_for: Duration::from_secs(30),
            ..busy_once
        };
        assert_eq!(look(later, LIMITS, FLOOR).resize, Some(128));
        // Still a quarter busy: it stays.
        let half = Traffic {
            rate: 30_000.0,
            calm_for: Duration::from_secs(60),
            ..idle(2048)
        };
        assert_eq!(
            look(half, LIMITS, FLOOR),
            Look {
                resize: None,
                calm: false
            }
        );
    }

    #[test]
    fn a_port_is_looked_at_early_once_its_rate_or_its_fill_ring_asks_for_more() {
        let ms = Duration::from_millis;
        // 50 kpps for 10 ms, at the floor: 20 ms of it needs 1000 frames.
        assert!(outgrown(500, ms(10), 128, (92, 92), LIMITS));
        // The same rate fits a port of 1024 frames.
        assert!(!outgrown(500, ms(10), 1024, (900, 900), LIMITS));
        // A trickle does not, but a fill ring that ran below a quarter does.
        assert!(!outgrown(20, ms(10), 128, (80, 92), LIMITS));
        assert!(outgrown(20, ms(10), 128, (22, 92), LIMITS));
        // Not sooner than EARLIEST_LOOK after the last look, nor past the ceiling.
        assert!(!outgrown(500, ms(5), 128, (0, 92), LIMITS));
        assert!(!outgrown(50_000, ms(50), 4096, (0, 3584), LIMITS));
    }

    #[test]
    fn a_floor_above_the_ceiling_is_the_ceiling() {
        let odd = Limits::new(512, 256, 0, Duration::from_secs(1));
        assert_eq!(odd.resting(1), 256);
        assert_eq!(needed(0.0, odd), 256);
        assert_eq!(needed(1e9, odd), 256);
    }

    #[test]
    fn ports_rest_at_their_share_of_the_budget_between_the_floor_and_the_ceiling() {
        let limits = Limits {
            budget: 16_384,
            ..LIMITS
        };
        let rests: Vec<usize> = [0, 1, 4, 5, 8, 9, 16, 100, 10_000]
            .iter()
            .map(|&ports| limits.resting(ports))
            .collect();
        assert_eq!(rests, [4096, 4096, 4096, 2048, 2048, 1024, 1024, 128, 128]);
        // No budget: every port rests at the floor.
        assert_eq!(LIMITS.resting(1), 128);
    }

    #[test]
    fn a_calm_port_shrinks_to_its_resting_size_and_is_not_grown_to_it() {
        let calm_for = Duration::from_secs(30);
        // Grown by traffic to the ceiling, calm since: back to its resting size.
        let grown = Traffic {
            calm_for,
            ..idle(4096)
        };
        assert_eq!(look(grown, LIMITS, 1024).resize, Some(1024));
        // At its resting size: it stays.
        let resting = Traffic {
            calm_for,
            ..idle(1024)
        };
        assert_eq!(look(resting, LIMITS, 1024).resize, None);
        // Opened at the floor when the worker had more ports: the resting size rose as
        // they closed, and the port stays as it is.
        assert_eq!(look(idle(128), LIMITS, 4096).resize, None);
        // Still busy above its resting size: it stays.
        let busy = Traffic {
            rate: 50_000.0,
            calm_for,
            ..idle(1024)
        };
        assert_eq!(look(busy, LIMITS, 256).resize, None);
    }
}
