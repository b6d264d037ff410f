//! One direction of an impaired link, as a pure state machine: given a frame's length and
//! the time, it decides the frame's fate (lost, dropped by the rate limit's queue, or
//! sent at a time, once or twice, perhaps with a bit flipped). Seeded, so that tests
//! and reruns draw the same fates. The worker does what it decides (`held.rs` keeps the
//! frames until their time).
//!
//! The order of the steps follows netem's: loss, then the rate limit's queue, then delay
//! and jitter; duplication and corruption apply to frames that are sent. Jitter never
//! reorders frames (a frame is not sent before the one ahead of it); reordering is its
//! own setting: a frame chosen for it is sent when it leaves the queue, ahead of frames
//! still held by the delay.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

use super::{ImpairmentSpec, Jitter, Loss, QueueLimit};

/// Why a frame was dropped by an impairment, counted per link and direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Lost by the loss model.
    Loss,
    /// The rate limit's queue was full.
    QueueFull,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Drop(DropReason),
    Send {
        at: Instant,
        /// 1, or 2 for a duplicated frame.
        copies: u8,
        /// The bit to flip (counted from the frame's first byte), for a corrupted frame.
        flip_bit: Option<usize>,
    },
}

pub struct Direction {
    spec: ImpairmentSpec,
    rng: SmallRng,
    /// Gilbert-Elliott: in the bad state.
    bad: bool,
    /// When the rate-limited wire is free again.
    wire_free_at: Option<Instant>,
    /// Frames waiting for the rate-limited wire: when each leaves it, and its length.
    queued: VecDeque<(Instant, usize)>,
    queued_bytes: u64,
    /// When the last frame not chosen for reordering is sent.
    last_send: Option<Instant>,
}

impl Direction {
    pub fn new(spec: ImpairmentSpec, seed: u64) -> Direction {
        Direction {
            spec,
            rng: SmallRng::seed_from_u64(seed),
            bad: false,
            wire_free_at: None,
            queued: VecDeque::new(),
            queued_bytes: 0,
            last_send: None,
        }
    }

    pub fn spec(&self) -> &ImpairmentSpec {
        &self.spec
    }

    /// Changes the settings; frames already decided keep their fate.
    pub fn set(&mut self, spec: ImpairmentSpec) {
        if spec.rate.is_none() {
            self.wire_free_at = None;
            self.queued.clear();
            self.queued_bytes = 0;
        }
        self.spec = spec;
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random_bool(p.min(1.0))
    }

    fn lost(&mut self) -> bool {
        match self.spec.loss {
            Loss::None => false,
            Loss::Random(p) => self.chance(p),
            Loss::GilbertElliott {
                p,
                r,
                good_loss,
                bad_loss,
            } => {
                let flip = if self.bad { r } else { p };
                if self.chance(flip) {
                    self.bad = !self.bad;
                }
                let loss = if self.bad { bad_loss } else { good_loss };
                self.chance(loss)
            }
        }
    }

    /// The delay with its jitter drawn, never below zero.
    fn delay(&mut self) -> Duration {
        let (delay, jitter) = (self.spec.delay, self.spec.jitter);
        if jitter.is_zero() {
            return delay;
        }
        let (mean, spread) = (delay.as_secs_f64(), jitter.as_secs_f64());
        let drawn = match self.spec.jitter_shape {
            Jitter::Uniform => self.rng.random_range(mean - spread..=mean + spread),
            Jitter::Normal => {
                let normal = Normal::new(mean, spread).expect("a finite, positive spread");
                normal
                    .sample(&mut self.rng)
                    .clamp(mean - 4.0 * spread, mean + 4.0 * spread)
            }
        };
        Duration::from_secs_f64(drawn.max(0.0))
    }

    /// When a frame of `len` bytes arriving at `now` leaves the rate-limited wire, or
    /// `None` when the queue is full.
    fn departure(&mut self, now: Instant, len: usize) -> Option<Instant> {
        let Some(rate) = self.spec.rate else {
            return Some(now);
        };
        while self
            .queued
            .front()
            .is_some_and(|(leaves, _)| *leaves <= now)
        {
            let (_, gone) = self.queued.pop_front().expect("front exists");
            self.queued_bytes -= gone as u64;
        }
        let full = match rate.limit {
            QueueLimit::Frames(n) => self.queued.len() as u64 >= n,
            QueueLimit::Bytes(n) => self.queued_bytes + len as u64 > n,
        };
        if full {
            return None;
        }
        let start = self.wire_free_at.filter(|t| *t > now).unwrap_or(now);
        let on_wire = Duration::from_secs_f64(len as f64 * 8.0 / rate.bits_per_second as f64);
        let leaves = start + on_wire;
        self.wire_free_at = Some(leaves);
        self.queued.push_back((leaves, len));
        self.queued_bytes += len as u64;
        Some(leaves)
    }

    /// The fate of a frame of `len` bytes that arrives at `now`.
    pub fn decide(&mut self, now: Instant, len: usize) -> Fate {
        if self.lost() {
            return Fate::Drop(DropReason::Loss);
        }
        let Some(departure) = self.departure(now, len) else {
            return Fate::Drop(DropReason::QueueFull);
        };
        let at = if self.chance(self.spec.reorder) {
            departure
        } else {
            let at = departure + self.delay();
            let at = self.last_send.map_or(at, |last| at.max(last));
            self.last_send = Some(at);
            at
        };
        let copies = if self.chance(self.spec.duplicate) {
            2
        } else {
            1
        };
        let flip_bit =
            (len > 0 && self.chance(self.spec.corrupt)).then(|| self.rng.random_range(0..len * 8));
        Fate::Send {
            at,
            copies,
            flip_bit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::impairment::Rate;

    const FRAMES: usize = 100_000;

    fn run(spec: ImpairmentSpec, gap: Duration, len: usize) -> (Instant, Vec<Fate>) {
        let start = Instant::now();
        let mut direction = Direction::new(spec, 7);
        let fates = (0..FRAMES)
            .map(|i| direction.decide(start + gap * i as u32, len))
            .collect();
        (start, fates)
    }

    fn share(fates: &[Fate], pick: impl Fn(&Fate) -> bool) -> f64 {
        fates.iter().filter(|f| pick(f)).count() as f64 / fates.len() as f64
    }

    #[test]
    fn random_loss_is_within_a_percent_of_the_setting() {
        for p in [0.01, 0.1, 0.5] {
            let spec = ImpairmentSpec {
                loss: Loss::Random(p),
                ..Default::default()
            };
            let (_, fates) = run(spec, Duration::from_micros(10), 100);
            let lost = share(&fates, |f| *f == Fate::Drop(DropReason::Loss));
            assert!((lost - p).abs() / p < 0.1, "{p}: {lost}");
        }
    }

    #[test]
    fn gilbert_elliott_losses_come_in_bursts_of_the_set_mean_length() {
        let loss = Loss::GilbertElliott {
            p: 0.01,
            r: 0.25,
            good_loss: 0.0,
            bad_loss: 1.0,
        };
        let spec = ImpairmentSpec {
            loss,
            ..Default::default()
        };
        let (_, fates) = run(spec, Duration::from_micros(10), 100);
        let lost: Vec<bool> = fates.iter().map(|f| matches!(f, Fate::Drop(_))).collect();
        let share_lost = lost.iter().filter(|l| **l).count() as f64 / lost.len() as f64;
        assert!(
            (share_lost - loss.mean()).abs() / loss.mean() < 0.15,
            "{share_lost}"
        );
        let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count();
        let mean_burst = lost.iter().filter(|l| **l).count() as f64 / bursts as f64;
        assert!((mean_burst - 4.0).abs() < 0.5, "mean burst {mean_burst}");
    }

    #[test]
    fn delay_without_jitter_is_exact_and_jitter_keeps_order_and_spread() {
        let delay = Duration::from_millis(10);
        let spec = ImpairmentSpec {
            delay,
            ..Default::default()
        };
        let gap = Duration::from_micros(100);
        let (start, fates) = run(spec, gap, 100);
        for (i, fate) in fates.iter().enumerate().step_by(997) {
            assert_eq!(
                *fate,
                Fate::Send {
                    at: start + gap * i as u32 + delay,
                    copies: 1,
                    flip_bit: None
                }
            );
        }
        for shape in [Jitter::Uniform, Jitter::Normal] {
            let spec = ImpairmentSpec {
                delay,
                jitter: Duration::from_millis(1),
                jitter_shape: shape,
                ..Default::default()
            };
            // Frames 10 ms apart: jitter of 1 ms cannot be held back by order.
            let gap = Duration::from_millis(10);
            let (start, fates) = run(spec, gap, 100);
            let added: Vec<f64> = fates
                .iter()
                .enumerate()
                .map(|(i, f)| match f {
                    Fate::Send { at, .. } => (*at - (start + gap * i as u32)).as_secs_f64(),
                    Fate::Drop(_) => panic!("nothing is dropped"),
                })
                .collect();
            let mean = added.iter().sum::<f64>() / added.len() as f64;
            let sd =
                (added.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / added.len() as f64).sqrt();
            assert!((mean - 0.010).abs() < 0.000_05, "{shape:?}: mean {mean}");
            // Uniform over ±1 ms has σ = 1/√3 ms; normal has σ = 1 ms.
            let want = if shape == Jitter::Uniform {
                0.001 / 3f64.sqrt()
            } else {
                0.001
            };
            assert!((sd - want).abs() / want < 0.05, "{shape:?}: sd {sd}");
        }
        // Frames closer together than the jitter still leave in order.
        let spec = ImpairmentSpec {
            delay,
            jitter: Duration::from_millis(5),
            ..Default::default()
        };
        let (_, fates) = run(spec, Duration::from_micros(10), 100);
        let times: Vec<Instant> = fates
            .iter()
            .map(|f| match f {
                Fate::Send { at, .. } => *at,
                Fate::Drop(_) => panic!("nothing is dropped"),
            })
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn a_rate_limit_spaces_frames_by_their_time_on_the_wire_and_drops_at_the_queue_limit() {
        let rate = Rate {
            bits_per_second: 10_000_000,
            limit: QueueLimit::Frames(100),
        };
        let spec = ImpairmentSpec {
            rate: Some(rate),
            ..Default::default()
        };
        // 1250-byte frames take 1 ms each at 10 Mbit/s; they come every 0.5 ms.
        let (start, fates) = run(spec, Duration::from_micros(500), 1250);
        let sent: Vec<Instant> = fates
            .iter()
            .filter_map(|f| match f {
                Fate::Send { at, .. } => Some(*at),
                Fate::Drop(_) => None,
            })
            .collect();
        let dropped = fates.len() - sent.len();
        assert!(dropped > 0 && dropped < fates.len() / 2 + 200, "{dropped}");
        let spacing = sent.windows(2).map(|w| w[1] - w[0]).collect::<Vec<_>>();
        assert!(
            spacing.iter().all(|s| *s == Duration::from_millis(1)),
            "{:?}",
            &spacing[..3]
        );
        // Delivered rate: the frames sent over the time they took.
        let took = (*sent.last().unwrap() - start).as_secs_f64();
        let bits = sent.len() as f64 * 1250.0 * 8.0;
        assert!((bits / took - 1e7).abs() / 1e7 < 0.02, "{}", bits / took);
        // A byte limit counts bytes.
        let spec = ImpairmentSpec {
            rate: Some(Rate {
                limit: QueueLimit::Bytes(2500),
                ..rate
            }),
            ..Default::default()
        };
        let mut direction = Direction::new(spec, 1);
        let now = Instant::now();
        let fates: Vec<Fate> = (0..4).map(|_| direction.decide(now, 1250)).collect();
        assert!(matches!(fates[1], Fate::Send { .. }));
        assert_eq!(fates[2], Fate::Drop(DropReason::QueueFull));
    }

    #[test]
    fn duplication_corruption_and_reordering_happen_at_their_rates() {
        let spec = ImpairmentSpec {
            delay: Duration::from_millis(1),
            duplicate: 0.2,
            corrupt: 0.3,
            reorder: 0.1,
            ..Default::default()
        };
        let gap = Duration::from_micros(10);
        let (start, fates) = run(spec, gap, 64);
        let twice = share(&fates, |f| matches!(f, Fate::Send { copies: 2, .. }));
        let flipped = share(
            &fates,
            |f| matches!(f, Fate::Send { flip_bit: Some(b), .. } if *b < 64 * 8),
        );
        let early = fates
            .iter()
            .enumerate()
            .filter(|(i, f)| matches!(f, Fate::Send { at, .. } if *at == start + gap * *i as u32))
            .count() as f64
            / FRAMES as f64;
        for (got, want) in [(twice, 0.2), (flipped, 0.3), (early, 0.1)] {
            assert!((got - want).abs() / want < 0.05, "{got} vs {want}");
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_fates() {
        let spec = ImpairmentSpec {
            loss: Loss::Random(0.3),
            jitter: Duration::from_millis(2),
            delay: Duration::from_millis(5),
            ..Default::default()
        };
        let relative = |(start, fates): (Instant, Vec<Fate>)| -> Vec<Option<Duration>> {
            fates
                .iter()
                .map(|f| match f {
                    Fate::Send { at, .. } => Some(*at - start),
                    Fate::Drop(_) => None,
                })
                .collect()
        };
        let gap = Duration::from_micros(1);
        assert_eq!(relative(run(spec, gap, 100)), relative(run(spec, gap, 100)));
    }
}
