//! A link's impairment as users write it, in a lab file's link and in a Topology link
//! (`impairment`, xwire's own field; docs/lab-file.md lists the keys): durations such
//! as `10ms`, rates such as `100mbit`, percentages as plain numbers. `Impairment::spec`
//! turns it into the `ImpairmentSpec` the fast path applies (`spec.rs`), naming the key
//! that is wrong.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
pub mod spec;

pub use spec::{ImpairmentSpec, Jitter, Loss, QueueLimit, Rate, MAX_DELAY};

/// The rate limit's queue when neither `queue_frames` nor `queue_bytes` is given: 1000
/// frames, as a Linux interface's default transmit queue.
pub const DEFAULT_QUEUE_FRAMES: u64 = 1000;

/// One direction's impairment: what the pod at this end sends on the link suffers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Impairment {
    /// Added latency, e.g. `10ms`, `250us`, `1.5ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// Spread around the delay, e.g. `1ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// `uniform` (the default: within delay ± jitter) or `normal` (jitter is the standard
    /// deviation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_distribution: Option<String>,
    /// Percent of frames lost at random, each on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Bursts of loss (the Gilbert-Elliott model), instead of `loss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_burst: Option<LossBurst>,
    /// A rate limit, e.g. `100mbit`, `1gbit`, `500kbit` (bits per second; `bps`, `kbps`,
    /// `mbps`, `gbps` are bytes per second, as tc reads them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    /// The rate limit's queue, in frames (default 1000) or in bytes; beyond it frames
    /// are dropped (tail drop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_frames: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_bytes: Option<u64>,
    /// Percent of frames with one bit flipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corrupt: Option<f64>,
    /// Percent of frames sent twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<f64>,
    /// Percent of frames sent at once, ahead of frames still held by the delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reorder: Option<f64>,
}

/// The Gilbert-Elliott model, in percent: the chance per frame of going from the good
/// state to the bad one (`p`) and back (`r`), and the loss in each state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LossBurst {
    pub p: f64,
    pub r: f64,
    #[serde(default)]
    pub good_loss: f64,
    #[serde(default = "all")]
    pub bad_loss: f64,
}

fn all() -> f64 {
    100.0
}

impl Impairment {
    /// The fast path's form, or why it cannot be had (naming the key).
    pub fn spec(&self) -> Result<ImpairmentSpec, String> {
        let duration = |key: &str, v: &Option<String>| {
            v.as_deref()
                .map(parse_duration)
                .transpose()
                .map_err(|e| format!("{key}: {e}"))
                .map(Option::unwrap_or_default)
        };
        let share = |key: &str, v: Option<f64>| match v {
            None => Ok(0.0),
            Some(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
            Some(p) => Err(format!("{key}: {p} is not a percentage from 0 to 100")),
        };
        let jitter_shape = match self.jitter_distribution.as_deref() {
            None | Some("uniform") => Jitter::Uniform,
            Some("normal") => Jitter::Normal,
            Some(other) => {
                return Err(format!(
                    "jitter_distribution: {other:?} is neither uniform nor normal"
                ))
            }
        };
        let loss = match (&self.loss, &self.loss_burst) {
            (Some(_), Some(_)) => return Err("loss and loss_burst: give one of the two".into()),
            (Some(p), None) => Loss::Random(share("loss", Some(*p))?),
            (None, Some(b)) => Loss::GilbertElliott {
                p: share("loss_burst.p", Some(b.p))?,
                r: share("loss_burst.r", Some(b.r))?,
                good_loss: share("loss_burst.good_loss", Some(b.good_loss))?,
                bad_loss: share("loss_burst.bad_loss", Some(b.bad_loss))?,
            },
            (None, None) => Loss::None,
        };
        let limit = match (self.queue_frames, self.queue_bytes) {
            (Some(_), Some(_)) => {
                return Err("queue_frames and queue_bytes: give one of the two".into())
            }
            (Some(0), _) | (_, Some(0)) => return Err("the rate limit's queue cannot be 0".into()),
            (Some(n), None) => QueueLimit::Frames(n),
            (None, Some(n)) => QueueLimit::Bytes(n),
            (None, None) => QueueLimit::Frames(DEFAULT_QUEUE_FRAMES),
        };
        let rate = match &self.rate {
            None if self.queue_frames.is_some() || self.queue_bytes.is_some() => {
                return Err("queue_frames and queue_bytes limit the rate's queue: set rate".into())
            }
            None => None,
            Some(text) => Some(Rate {
                bits_per_second: parse_rate(text).map_err(|e| format!("rate: {e}"))?,
                limit,
            }),
        };
        let spec = ImpairmentSpec {
            delay: duration("delay", &self.delay)?,
            jitter: duration("jitter", &self.jitter)?,
            jitter_shape,
            loss,
            rate,
            corrupt: share("corrupt", self.corrupt)?,
            duplicate: share("duplicate", self.duplicate)?,
            reorder: share("reorder", self.reorder)?,
        };
        spec.check()?;
        Ok(spec)
    }

    /// Whether it sets nothing at all.
    pub fn is_empty(&self) -> bool {
        *self == Impairment::default()
    }

    /// Lays `over`'s keys on top of this one's (for `lab impair` changing some keys).
    pub fn merged(&self, over: &Impairment) -> Impairment {
        let pick = |a: &Option<String>, b: &Option<String>| b.clone().or_else(|| a.clone());
        Impairment {
            delay: pick(&self.delay, &over.delay),
            jitter: pick(&self.jitter, &over.jitter),
            jitter_distribution: pick(&self.jitter_distribution, &over.jitter_distribution),
            loss: over
                .loss
                .or(self.loss)
                .filter(|_| over.loss_burst.is_none()),
            loss_burst: over
                .loss_burst
                .clone()
                .or_else(|| self.loss_burst.clone().filter(|_| over.loss.is_none())),
            rate: pick(&self.rate, &over.rate),
            queue_frames: over
                .queue_frames
                .or(self.queue_frames.filter(|_| over.queue_bytes.is_none())),
            queue_bytes: over
                .queue_bytes
                .or(self.queue_bytes.filter(|_| over.queue_frames.is_none())),
            corrupt: over.corrupt.or(self.corrupt),
            duplicate: over.duplicate.or(self.duplicate),
            reorder: over.reorder.or(self.reorder),
        }
    }
}

/// One line for `lab status`: the keys that are set, as written.
impl fmt::Display for Impairment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(d) = &self.delay {
            parts.push(format!("delay {d}"));
        }
        if let Some(j) = &self.jitter {
            let shape = self.jitter_distribution.as_deref().unwrap_or("uniform");
            parts.push(format!("jitter {j} ({shape})"));
        }
        if let Some(l) = self.loss {
            parts.push(format!("loss {l}%"));
        }
        if let Some(b) = &self.loss_burst {
            parts.push(format!(
                "loss bursts (p {}%, r {}%, {}%/{}%)",
                b.p, b.r, b.good_loss, b.bad_loss
            ));
        }
        if let Some(r) = &self.rate {
            match (self.queue_frames, self.queue_bytes) {
                (_, Some(b)) => parts.push(format!("rate {r} (queue {b} bytes)")),
                (f, None) => parts.push(format!(
                    "rate {r} (queue {} frames)",
                    f.unwrap_or(DEFAULT_QUEUE_FRAMES)
                )),
            }
        }
        for (name, v) in [
            ("corrupt", self.corrupt),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if let Some(v) = v {
                parts.push(format!("{name} {v}%"));
            }
        }
        if parts.is_empty() {
            return f.write_str("none (all zero)");
        }
        f.write_str(&parts.join(", "))
    }
}

// Written here: humantime, the usual crate, takes no fractions ("1.5ms"), which users of
// netem write; rates in tc's units have no crate at all.

/// `10ms`, `1.5ms`, `250us`, `2s`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 10ms, 250us or 1.5s"))?;
    let scale = match unit.trim() {
        "" if value == 0.0 => 0.0,
        "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        _ => return Err(format!("{text:?}: the unit is one of s, ms, us, ns")),
    };
    let duration = Duration::from_secs_f64(value * scale);
    if duration > MAX_DELAY {
        return Err(format!("{text} is longer than {MAX_DELAY:?}"));
    }
    Ok(duration)
}

/// `100mbit`, `1gbit`, `10kbit`, `9600bit` (bits per second), or `12mbps` (bytes per
/// second, as tc reads it). At least 1 kbit/s.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let split = lower
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(lower.len());
    let (number, unit) = lower.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a rate such as 100mbit or 1gbit"))?;
    let bits = match unit {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "bps" => 8.0,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => {
            return Err(format!(
                "{text:?}: the unit is one of bit, kbit, mbit, gbit (or bps, kbps, mbps, gbps for bytes)"
            ))
        }
    };
    let rate = (value * bits).round();
    if !(1e3..=1e12).contains(&rate) {
        return Err(format!("{text} is outside 1kbit..1000gbit"));
    }
    Ok(rate as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_rates_in_the_units_users_write() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
        assert!(parse_duration("11s").unwrap_err().contains("longer"));
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_rate("100mbit"), Ok(100_000_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("1.5mbps"), Ok(12_000_000));
        assert!(parse_rate("100").unwrap_err().contains("unit"));
        assert!(parse_rate("10bit").unwrap_err().contains("outside"));
    }

    #[test]
    fn an_impairment_becomes_a_spec_and_a_bad_key_is_named() {
        let i: Impairment = serde_yaml_ng::from_str(
            "{delay: 10ms, jitter: 1ms, jitter_distribution: normal, loss: 1.5, rate: 10mbit, queue_bytes: 30000, duplicate: 2}",
        )
        .unwrap();
        let spec = i.spec().unwrap();
        assert_eq!(spec.delay, Duration::from_millis(10));
        assert_eq!(spec.jitter_shape, Jitter::Normal);
        assert_eq!(spec.loss, Loss::Random(0.015));
        assert_eq!(
            spec.rate,
            Some(Rate {
                bits_per_second: 10_000_000,
                limit: QueueLimit::Bytes(30_000)
            })
        );
        assert_eq!(spec.duplicate, 0.02);
        assert_eq!(
            i.to_string(),
            "delay 10ms, jitter 1ms (normal), loss 1.5%, rate 10mbit (queue 30000 bytes), duplicate 2%"
        );
        let refused = |yaml: &str| {
            serde_yaml_ng::from_str::<Impairment>(yaml)
                .map_err(|e| e.to_string())
                .and_then(|i| i.spec())
                .unwrap_err()
        };
        assert!(refused("{loss: 120}").contains("loss"));
        assert!(refused("{corrupt: -1}").contains("corrupt"));
        assert!(refused("{queue_frames: 10}").contains("set rate"));
        assert!(refused("{loss: 1, loss_burst: {p: 1, r: 10}}").contains("one of the two"));
        assert!(refused("{jitter_distribution: pareto}").contains("pareto"));
        assert!(refused("{latency: 10ms}").contains("latency"));
        let burst: Impairment = serde_yaml_ng::from_str("{loss_burst: {p: 1, r: 25}}").unwrap();
        assert!(matches!(
            burst.spec().unwrap().loss,
            Loss::GilbertElliott { bad_loss, .. } if bad_loss == 1.0
        ));
    }

    #[test]
    fn merging_replaces_only_the_keys_given() {
        let base = Impairment {
            delay: Some("10ms".into()),
            loss: Some(5.0),
            ..Impairment::default()
        };
        let over = Impairment {
            loss_burst: Some(LossBurst {
                p: 1.0,
                r: 10.0,
                good_loss: 0.0,
                bad_loss: 100.0,
            }),
            ..Impairment::default()
        };
        let merged = base.merged(&over);
        assert_eq!(merged.delay.as_deref(), Some("10ms"));
        assert_eq!(merged.loss, None, "a burst model replaces random loss");
        assert!(merged.loss_burst.is_some());
    }
}
