//! Where `cni-scale`'s calls spent their time: the daemons' own breakdown of each call
//! (the `xwire_cni_call_step_duration_seconds` histograms, scraped from their metrics
//! endpoints after the run), and what happened outside them (the plugin's start, its
//! socket round trip), from the call times measured outside.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use crate::testbed::Netns;

/// Where each daemon serves its metrics, inside its node's namespace.
pub(crate) const METRICS_ADDRESS: &str = "127.0.0.1:9470";

/// Mean milliseconds per call, by step (the daemons' step names, plus `daemon` for the
/// whole of its part and `outside` for the plugin's start and the socket round trip).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Breakdown {
    pub add: BTreeMap<String, f64>,
    pub del: BTreeMap<String, f64>,
    /// Mean time of the plugin answering VERSION: its start and exit, no daemon.
    pub plugin_start_ms: f64,
}

/// Sums and counts of one histogram family, by its labels.
#[derive(Default)]
struct Sums {
    /// (command, step) -> (sum in seconds, count).
    steps: BTreeMap<(String, String), (f64, u64)>,
    /// command -> (sum, count) of the whole call on the daemon.
    calls: BTreeMap<String, (f64, u64)>,
}

/// Reads a daemon's metrics (a plain HTTP GET from inside its namespace).
pub fn scrape(ns: &Netns) -> Result<String> {
    ns.run(|| -> Result<String> {
        let mut stream =
            TcpStream::connect(METRICS_ADDRESS).context("connect to the metrics endpoint")?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut out = String::new();
        stream.read_to_string(&mut out)?;
        Ok(out)
    })?
}

/// The label `name`'s value in a sample's label set (`{a="x",b="y"}`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

fn add_samples(text: &str, sums: &mut Sums) -> Result<()> {
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some((name, labels)) = series.split_once('{') else {
            continue;
        };
        let value: f64 = value
            .parse()
            .map_err(|_| anyhow!("a sample that is no number: {line}"))?;
        let command = label(labels, "command").unwrap_or_default().to_owned();
        let (family, is_sum) = match name.strip_suffix("_sum") {
            Some(family) => (family, true),
            None => match name.strip_suffix("_count") {
                Some(family) => (family, false),
                None => continue,
            },
        };
        let slot = match family {
            "xwire_cni_call_step_duration_seconds" => {
                let step = label(labels, "step").unwrap_or_default().to_owned();
                sums.steps.entry((command, step)).or_default()
            }
            "xwire_cni_call_duration_seconds" => sums.calls.entry(command).or_default(),
            _ => continue,
        };
        if is_sum {
            slot.0 += value;
        } else {
            slot.1 += value as u64;
        }
    }
    Ok(())
}

/// The breakdown from the daemons' `metrics` texts and the mean call times measured
/// outside (`outside_ms`: ADD's, DEL's).
pub fn breakdown(
    metrics: &[String],
    outside_ms: (f64, f64),
    plugin_start_ms: f64,
) -> Result<Breakdown> {
    let mut sums = Sums::default();
    for text in metrics {
        add_samples(text, &mut sums)?;
    }
    let mean_ms = |(sum, count): (f64, u64)| {
        if count == 0 {
            0.0
        } else {
            sum * 1e3 / count as f64
        }
    };
    let mut out = Breakdown {
        plugin_start_ms,
        ..Breakdown::default()
    };
    for (command, measured) in [("add", outside_ms.0), ("del", outside_ms.1)] {
        let steps = if command == "add" {
            &mut out.add
        } else {
            &mut out.del
        };
        for ((c, step), sum) in &sums.steps {
            if c == command {
                steps.insert(step.clone(), mean_ms(*sum));
            }
        }
        let daemon = sums
            .calls
            .get(command)
            .copied()
            .map(mean_ms)
            .unwrap_or_default();
        steps.insert("daemon".into(), daemon);
        steps.insert("outside".into(), (measured - daemon).max(0.0));
    }
    Ok(out)
}

/// The breakdown as a table: mean ms per call, and each step's share of the call.
pub fn print(b: &Breakdown, mean_add_ms: f64, mean_del_ms: f64) {
    println!("where the time goes (mean ms per call; share of the mean call)");
    println!(
        "{:<34} {:>9} {:>6} {:>9} {:>6}",
        "step", "ADD", "", "DEL", ""
    );
    let steps: Vec<&String> = b
        .add
        .keys()
        .chain(b.del.keys())
        .filter(|s| !matches!(s.as_str(), "daemon" | "outside"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let row = |name: &str, add: f64, del: f64| {
        println!(
            "{name:<34} {add:>9.2} {:>5.0}% {del:>9.2} {:>5.0}%",
            100.0 * add / mean_add_ms.max(f64::EPSILON),
            100.0 * del / mean_del_ms.max(f64::EPSILON)
        );
    };
    let get = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or_default();
    for step in steps {
        row(
            &format!("  daemon: {step}"),
            get(&b.add, step),
            get(&b.del, step),
        );
    }
    row(
        "daemon (all of the above)",
        get(&b.add, "daemon"),
        get(&b.del, "daemon"),
    );
    row(
        "plugin and socket",
        get(&b.add, "outside"),
        get(&b.del, "outside"),
    );
    println!(
        "(the plugin alone, answering VERSION with no daemon: {:.2} ms a call)",
        b.plugin_start_ms
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_calls_are_summed_over_the_daemons() {
        let a = "# HELP x\n\
            xwire_cni_call_step_duration_seconds_sum{command=\"del\",step=\"netlink\"} 0.2\n\
            xwire_cni_call_step_duration_seconds_count{command=\"del\",step=\"netlink\"} 10\n\
            xwire_cni_call_step_duration_seconds_bucket{command=\"del\",step=\"netlink\",le=\"0.1\"} 10\n\
            xwire_cni_call_duration_seconds_sum{command=\"del\"} 0.5\n\
            xwire_cni_call_duration_seconds_count{command=\"del\"} 10\n";
        let b = "xwire_cni_call_step_duration_seconds_sum{command=\"del\",step=\"netlink\"} 0.4\n\
            xwire_cni_call_step_duration_seconds_count{command=\"del\",step=\"netlink\"} 10\n\
            xwire_cni_call_duration_seconds_sum{command=\"del\"} 0.5\n\
            xwire_cni_call_duration_seconds_count{command=\"del\"} 10\n";
        let got = breakdown(&[a.into(), b.into()], (0.0, 70.0), 3.0).unwrap();
        assert!((got.del["netlink"] - 30.0).abs() < 1e-9, "{:?}", got.del);
        assert!((got.del["daemon"] - 50.0).abs() < 1e-9);
        assert!((got.del["outside"] - 20.0).abs() < 1e-9);
        assert_eq!(got.add["daemon"], 0.0);
    }
}
