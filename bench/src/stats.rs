//! What a sink learns from the probes it receives: counts, reordering, latency.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Received probes, as they arrive.
#[derive(Debug)]
pub struct SinkStats {
    pub frames: u64,
    pub bytes: u64,
    pub reordered: u64,
    highest_seq: Option<u64>,
    latency_ns: Histogram<u64>,
}

impl Default for SinkStats {
    fn default() -> Self {
        SinkStats {
            frames: 0,
            bytes: 0,
            reordered: 0,
            highest_seq: None,
            // 1 ns to 60 s at 4 significant digits: the spread of a 100 ms delay is
            // read to 10 µs (3 digits would read it to 65 µs).
            latency_ns: Histogram::new_with_bounds(1, 60_000_000_000, 4).expect("valid bounds"),
        }
    }
}

impl SinkStats {
    pub fn record(&mut self, len: usize, seq: u64, sent_ns: u64, now_ns: u64) {
        self.frames += 1;
        self.bytes += len as u64;
        match self.highest_seq {
            Some(high) if seq < high => self.reordered += 1,
            _ => self.highest_seq = Some(seq),
        }
        let _ = self
            .latency_ns
            .record(now_ns.saturating_sub(sent_ns).max(1));
    }

    /// The report for a run that offered `offered` frames over `seconds`.
    pub fn report(&self, frame_bytes: usize, offered: u64, seconds: f64) -> Report {
        let us = |q: f64| self.latency_ns.value_at_quantile(q) as f64 / 1000.0;
        let delivered_pps = self.frames as f64 / seconds;
        Report {
            frame_bytes,
            offered,
            delivered: self.frames,
            offered_pps: offered as f64 / seconds,
            delivered_pps,
            gbps: self.bytes as f64 * 8.0 / seconds / 1e9,
            loss_ratio: if offered == 0 {
                0.0
            } else {
                1.0 - self.frames as f64 / offered as f64
            },
            reordered: self.reordered,
            sink_dropped: 0,
            p50_us: us(0.5),
            p99_us: us(0.99),
            p999_us: us(0.999),
            max_us: self.latency_ns.max() as f64 / 1000.0,
        }
    }
}

/// One measurement, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub frame_bytes: usize,
    pub offered: u64,
    pub delivered: u64,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub gbps: f64,
    pub loss_ratio: f64,
    pub reordered: u64,
    /// Frames the receiving end's own socket dropped during the run (its fill ring ran
    /// empty, or its RX ring was full): lost by the measuring end, not by the wire, and
    /// counted in `loss_ratio` all the same.
    pub sink_dropped: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_loss_and_latency_are_counted() {
        let mut s = SinkStats::default();
        for (seq, lat) in [(0, 10_000), (2, 20_000), (1, 30_000), (3, 40_000)] {
            s.record(100, seq, 1_000_000, 1_000_000 + lat);
        }
        let r = s.report(100, 5, 1.0);
        assert_eq!((r.delivered, r.reordered), (4, 1));
        assert!((r.loss_ratio - 0.2).abs() < 1e-9);
        assert!((r.gbps - 3200.0 / 1e9).abs() < 1e-12);
        assert!(r.p50_us >= 19.9 && r.p50_us <= 20.1, "{}", r.p50_us);
        assert!(r.max_us >= 39.9, "{}", r.max_us);
    }
}
