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
    /// Every trial of the search in the order run, the full-rate one first, as this
    /// direction saw it (none from older reports).
    #[serde(default)]
    pub search: Vec<SearchTrial>,
}

/// One trial of a loss-free search, as one direction saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchTrial {
    /// The rate asked of the generator; 0 for the full-rate trial (all it sends).
    pub asked_pps: f64,
    /// The long trial that confirms a rate the short ones found.
    pub confirm: bool,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub loss_ratio: f64,
    /// Of what was lost, the frames the receiving end's own socket dropped.
    pub sink_dropped: u64,
}

impl DirectionFigure {
    /// The search's trials, a line each: what a reader needs to tell a wire's edge from
    /// a stall that failed one trial (the search retries a failed short trial once, and
    /// steps a failed confirmation down).
    pub fn search_lines(&self) -> Vec<String> {
        self.search
            .iter()
            .map(|t| {
                let asked = if t.asked_pps == 0.0 {
                    "full rate".to_owned()
                } else {
                    format!("{:.0} pps", t.asked_pps)
                };
                format!(
                    "{:<7} {:>12}  offered {:>9.0}  delivered {:>9.0}  loss {:>6.2}%  sink dropped {}",
                    if t.confirm { "confirm" } else { "short" },
                    asked,
                    t.offered_pps,
                    t.delivered_pps,
                    t.loss_ratio * 100.0,
                    t.sink_dropped,
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_trial_of_a_search_is_a_line_and_older_reports_without_them_still_read() {
        let old = r#"{"direction":"a->b","at_once":false,"frame_bytes":1514,
            "lossfree_pps":1000.0,"lossfree_gbps":0.01,"p50_us":null,"p99_us":null,
            "trials":2,"peak_offered_pps":2000.0,"peak_delivered_pps":1000.0,
            "peak_gbps":0.01,"peak_loss_ratio":0.5}"#;
        let figure: DirectionFigure = serde_json::from_str(old).unwrap();
        assert!(figure.search.is_empty());
        let figure = DirectionFigure {
            search: vec![
                SearchTrial {
                    asked_pps: 0.0,
                    confirm: false,
                    offered_pps: 2000.0,
                    delivered_pps: 1000.0,
                    loss_ratio: 0.5,
                    sink_dropped: 3,
                },
                SearchTrial {
                    asked_pps: 980.0,
                    confirm: true,
                    offered_pps: 979.6,
                    delivered_pps: 979.6,
                    loss_ratio: 0.0,
                    sink_dropped: 0,
                },
            ],
            ..figure
        };
        let lines = figure.search_lines();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("short") && lines[0].contains("full rate"));
        assert!(lines[0].contains("50.00%") && lines[0].ends_with("sink dropped 3"));
        assert!(lines[1].starts_with("confirm") && lines[1].contains("980 pps"));
        let again: DirectionFigure =
            serde_json::from_str(&serde_json::to_string(&figure).unwrap()).unwrap();
        assert_eq!(again.search, figure.search);
    }
}
