//! What an impairment asks of one direction of a link: plain data, checked once when it
//! is set. The decisions it leads to are in `direction.rs`.

use std::time::Duration;

/// How jitter is spread around the delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniformly within delay ± jitter.
    #[default]
    Uniform,
    /// Normally, with jitter as the standard deviation (cut at delay ± 4 σ, and at zero).
    Normal,
}

/// Which frames are lost.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Loss {
    #[default]
    None,
    /// Each frame independently, with this probability (0..=1).
    Random(f64),
    /// The Gilbert-Elliott model: a good and a bad state, each with its own loss
    /// probability; `p` is the chance of going from good to bad at a frame, `r` of coming
    /// back. Losses come in bursts of mean length about 1/r (with `bad_loss` 1).
    GilbertElliott {
        p: f64,
        r: f64,
        good_loss: f64,
        bad_loss: f64,
    },
}

impl Loss {
    /// The long-run share of frames lost.
    pub fn mean(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Random(p) => p,
            Loss::GilbertElliott {
                p,
                r,
                good_loss,
                bad_loss,
            } => {
                if p + r == 0.0 {
                    return good_loss;
                }
                let bad_share = p / (p + r);
                bad_share * bad_loss + (1.0 - bad_share) * good_loss
            }
        }
    }
}

/// The most a rate-limited direction holds waiting for the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    Bytes(u64),
    Frames(u64),
}

/// A rate limit: frames leave no faster than `bits_per_second`, queued up to `limit`,
/// beyond which they are dropped (tail drop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub bits_per_second: u64,
    pub limit: QueueLimit,
}

/// The impairment of one direction of a link. All zero (the default) changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ImpairmentSpec {
    pub delay: Duration,
    pub jitter: Duration,
    pub jitter_shape: Jitter,
    pub loss: Loss,
    pub rate: Option<Rate>,
    /// Probabilities (0..=1) that a frame has one bit flipped, is sent twice, or is sent
    /// at once, ahead of frames still held by the delay.
    pub corrupt: f64,
    pub duplicate: f64,
    pub reorder: f64,
}

/// The most any delay (with its jitter) may hold a frame: frames held cost UMEM or
/// queue memory, bounded per link.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

impl ImpairmentSpec {
    /// Whether it changes nothing at all (a link with such an impairment needs no
    /// impairment state).
    pub fn is_none(&self) -> bool {
        self.delay.is_zero()
            && self.jitter.is_zero()
            && self.loss.mean() == 0.0
            && self.rate.is_none()
            && self.corrupt == 0.0
            && self.duplicate == 0.0
            && self.reorder == 0.0
    }

    /// Checks the ranges; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        let share = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!(
                    "{name}: {} is not a percentage from 0 to 100",
                    v * 100.0
                ))
            }
        };
        share("corrupt", self.corrupt)?;
        share("duplicate", self.duplicate)?;
        share("reorder", self.reorder)?;
        match self.loss {
            Loss::None => {}
            Loss::Random(p) => share("loss", p)?,
            Loss::GilbertElliott {
                p,
                r,
                good_loss,
                bad_loss,
            } => {
                share("loss p", p)?;
                share("loss r", r)?;
                share("loss in the good state", good_loss)?;
                share("loss in the bad state", bad_loss)?;
            }
        }
        if self.delay + self.jitter * 4 > MAX_DELAY {
            return Err(format!(
                "delay {:?} with jitter {:?} may hold a frame past the limit of {MAX_DELAY:?}",
                self.delay, self.jitter
            ));
        }
        if let Some(rate) = self.rate {
            if rate.bits_per_second < 8_000 {
                return Err(format!(
                    "rate: {} bit/s is below the least, 8 kbit/s",
                    rate.bits_per_second
                ));
            }
            match rate.limit {
                QueueLimit::Bytes(0) | QueueLimit::Frames(0) => {
                    return Err("rate: the queue limit is zero: nothing could pass".into())
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_settings_are_no_impairment_and_ranges_are_checked_by_name() {
        assert!(ImpairmentSpec::default().is_none());
        let loss = ImpairmentSpec {
            loss: Loss::Random(0.1),
            ..Default::default()
        };
        assert!(!loss.is_none());
        assert!(loss.check().is_ok());
        let bad = ImpairmentSpec {
            duplicate: 1.5,
            ..Default::default()
        };
        assert!(bad.check().unwrap_err().contains("duplicate"));
        let long = ImpairmentSpec {
            delay: Duration::from_secs(9),
            jitter: Duration::from_millis(500),
            ..Default::default()
        };
        assert!(long.check().unwrap_err().contains("limit"));
        let slow = ImpairmentSpec {
            rate: Some(Rate {
                bits_per_second: 1,
                limit: QueueLimit::Frames(10),
            }),
            ..Default::default()
        };
        assert!(slow.check().unwrap_err().contains("rate"));
    }

    #[test]
    fn the_gilbert_elliott_mean_is_the_bad_state_share_of_its_loss() {
        let ge = Loss::GilbertElliott {
            p: 0.01,
            r: 0.09,
            good_loss: 0.0,
            bad_loss: 1.0,
        };
        assert!((ge.mean() - 0.1).abs() < 1e-12);
    }
}
