//! What the bench tools report to each other: `xwire-pktgen lossfree --json` prints it,
//! `xwirectl lab bench` and the perf scenarios read it.

use serde::{Deserialize, Serialize};

/// A direction's figures: the loss-free rate with the latency at it, and what full offered
/// load gave. `xwire-pktgen lossfree --json` prints them; `xwirectl lab bench` reads them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DirectionFigure {
    /// "a->b" or "b->a".
    pub direction: String,
    /// Measured while the other direction carried the same rate.
    pub at_once: bool,
    pub frame_bytes: usize,
    /// The highest offered rate with loss at or below the criteria's (0: none passed).
    pub lossfree_pps: f64,
    /// The same, in Gbit/s of frame bytes.
    pub lossfree_gbps: f64,
    /// The lowest rate the search asked for that failed: with `lossfree_pps` 0, what the
    /// loss-free rate is below (none from older reports, or when the full rate passed).
    #[serde(default)]
    pub lowest_failed_pps: Option<f64>,
    /// Latency percentiles of the passing trial at the loss-free rate.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub trials: usize,
    pub peak_offered_pps: f64,
    pub peak_delivered_pps: f64,
    pub peak_gbps: f64,
    pub peak_loss_ratio: f64,
    /// Of what the full-rate trial lost, the frames the receiving end's own socket
    /// dropped: the measuring end fell behind, not the wire (0 from older reports).
    #[serde(default)]
    pub peak_sink_dropped: u64,
}
