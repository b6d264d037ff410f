//! Labs of a given size through the real CLI: a ring of `pods` pods over `nodes`
//! emulated nodes (pod i on node i mod nodes, so ring links cross nodes), an address
//! pair on every link, and chords across the ring from every fifth pod of its first half
//! to the pod opposite (a tenth as many links again): 3,000 pods make 3,300 links.
//! Measured: `xwirectl lab up` until it returns with every wire up, `lab down`, and the
//! resident memory of the lab's daemons once it is up. No baseline: these are sizes and
//! times against the targets, not a comparison.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pods: usize,
    pub nodes: usize,
    pub links: usize,
    pub up_s: f64,
    pub down_s: f64,
    /// The lab's processes (supervisor, daemons) once it is up: their resident memory,
    /// summed and the largest.
    pub rss_mib_total: f64,
    pub rss_mib_largest: f64,
    pub processes: usize,
}

/// The lab file: name `name`, the ring and its chords.
pub fn lab_file(name: &str, pods: usize, nodes: usize) -> (String, usize) {
    use std::fmt::Write;
    let mut text = format!("name: {name}\nnodes: [");
    for n in 0..nodes {
        let _ = write!(text, "{}n{n}", if n > 0 { ", " } else { "" });
    }
    text.push_str("]\n");
    if pods > 4000 {
        // The default management subnet (a /20) holds 4,093 pods.
        text.push_str("mgmt: {ipv4_subnet: 172.24.0.0/16}\n");
    }
    text.push_str("pods:\n");
    for i in 0..pods {
        let _ = writeln!(text, "  p{i}: {{node: n{}}}", i % nodes);
    }
    text.push_str("links:\n");
    let mut link = 0;
    let mut add = |text: &mut String, a: String, b: String| {
        // A /30 per link, from 10.100.0.0/14 up.
        let n = link * 4;
        let base = format!("10.{}.{}.{}", 100 + (n >> 16), (n >> 8) & 255, n & 255);
        let last: u32 = base.rsplit('.').next().unwrap().parse().unwrap();
        let prefix = base.rsplit_once('.').unwrap().0;
        let _ = writeln!(
            text,
            "  - endpoints: [{a}, {b}]\n    ips: [{prefix}.{}/30, {prefix}.{}/30]",
            last + 1,
            last + 2
        );
        link += 1;
    };
    for i in 0..pods {
        add(
            &mut text,
            format!("p{i}:eth1"),
            format!("p{}:eth2", (i + 1) % pods),
        );
    }
    for i in (0..pods / 2).step_by(5) {
        add(
            &mut text,
            format!("p{i}:eth3"),
            format!("p{}:eth4", i + pods / 2),
        );
    }
    (text, link)
}

/// Brings the lab up and down once with `xwirectl` and reports.
pub fn run(xwirectl: &Path, pods: usize, nodes: usize) -> Result<Report> {
    ensure!(pods >= 4 && nodes >= 1, "at least 4 pods and 1 node");
    let name = format!("size{pods}");
    let dir = std::env::temp_dir().join(format!("xwire-lab-size-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file: PathBuf = dir.join(format!("{name}.yaml"));
    let (text, links) = lab_file(&name, pods, nodes);
    std::fs::write(&file, text)?;
    let lab = |args: &[&str]| -> Result<String> {
        let out = Command::new(xwirectl)
            .arg("lab")
            .args(args)
            .output()
            .with_context(|| format!("running {}", xwirectl.display()))?;
        if !out.status.success() {
            bail!(
                "xwirectl lab {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let started = Instant::now();
    let up = lab(&["up", file.to_str().context("a path in UTF-8")?]);
    let up_s = started.elapsed().as_secs_f64();
    // Where `lab up` says its time went (namespaces, management network, daemons, CNI
    // ADDs, wires): what to look at when a size is slow.
    if let Some(phases) = up
        .as_deref()
        .ok()
        .and_then(|said| said.lines().find(|line| line.starts_with("up in ")))
    {
        eprintln!("lab-size: {pods} pods: {phases}");
    }
    let measured = up.and_then(|_| {
        lab(&["status", "--lab", &name, "--check", "--json"])?;
        memory_of(&name)
    });
    let started = Instant::now();
    let down = lab(&["down", "--lab", &name]);
    let down_s = started.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    let (rss_total, rss_largest, processes) = measured?;
    down?;
    Ok(Report {
        pods,
        nodes,
        links,
        up_s,
        down_s,
        rss_mib_total: rss_total as f64 / 1024.0,
        rss_mib_largest: rss_largest as f64 / 1024.0,
        processes,
    })
}

/// The lab's processes (those whose environment names the lab, as `lab up` marks them):
/// resident KiB summed, the largest, and how many.
fn memory_of(name: &str) -> Result<(u64, u64, usize)> {
    let mark = format!("XWIRE_LAB={name}");
    let (mut total, mut largest, mut count) = (0, 0, 0);
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let path = entry.path();
        let Ok(environ) = std::fs::read(path.join("environ")) else {
            continue;
        };
        if !environ.split(|&b| b == 0).any(|v| v == mark.as_bytes()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(path.join("status")) else {
            continue;
        };
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        total += kib;
        largest = largest.max(kib);
        count += 1;
    }
    ensure!(count > 0, "no process of lab {name} found");
    Ok((total, largest, count))
}

/// The table's header line.
pub fn header() -> String {
    format!(
        "{:>6} {:>5} {:>6} {:>8} {:>8} {:>10} {:>10} {:>6}",
        "PODS", "NODES", "LINKS", "UP S", "DOWN S", "RSS MIB", "LARGEST", "PROCS"
    )
}

/// One lab's line of the table.
pub fn row(r: &Report) -> String {
    format!(
        "{:>6} {:>5} {:>6} {:>8.1} {:>8.1} {:>10.0} {:>10.0} {:>6}",
        r.pods, r.nodes, r.links, r.up_s, r.down_s, r.rss_mib_total, r.rss_mib_largest, r.processes
    )
}

/// The spread of one size's runs: on a noisy machine the same build's `lab up` of 3,000
/// pods took anywhere from 40 to 122 s, so one run says little.
pub fn spread(runs: &[Report]) -> Option<String> {
    let first = runs.first()?;
    let of = |pick: fn(&Report) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        let middle = values.len() / 2;
        let median = if values.len() % 2 == 0 {
            (values[middle - 1] + values[middle]) / 2.0
        } else {
            values[middle]
        };
        (values[0], median, values[values.len() - 1])
    };
    let (up_min, up_median, up_max) = of(|r| r.up_s);
    let (down_min, down_median, down_max) = of(|r| r.down_s);
    Some(format!(
        "{} pods on {} nodes, {} runs: up {up_min:.1} / {up_median:.1} / {up_max:.1} s, \
         down {down_min:.1} / {down_median:.1} / {down_max:.1} s (least / median / most)",
        first.pods,
        first.nodes,
        runs.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_of_runs_is_their_least_median_and_most() {
        let run = |up_s, down_s| Report {
            pods: 3000,
            nodes: 3,
            links: 3300,
            up_s,
            down_s,
            rss_mib_total: 0.0,
            rss_mib_largest: 0.0,
            processes: 4,
        };
        assert_eq!(spread(&[]), None);
        assert_eq!(
            spread(&[run(98.1, 9.7), run(42.3, 9.4), run(56.3, 9.2)]).unwrap(),
            "3000 pods on 3 nodes, 3 runs: up 42.3 / 56.3 / 98.1 s, \
             down 9.2 / 9.4 / 9.7 s (least / median / most)"
        );
        assert!(spread(&[run(40.0, 9.0), run(50.0, 10.0)])
            .unwrap()
            .contains("up 40.0 / 45.0 / 50.0 s"));
    }

    #[test]
    fn three_thousand_pods_make_a_ring_and_three_hundred_chords() {
        let (text, links) = lab_file("size3000", 3000, 3);
        assert_eq!(links, 3300);
        assert!(text.contains("  p2999: {node: n2}\n"));
        assert!(text.contains("  - endpoints: [p2999:eth1, p0:eth2]\n"));
        assert!(text.contains("  - endpoints: [p1495:eth3, p2995:eth4]\n"));
        assert!(!text.contains("mgmt"));
        // Every link's /30 is its own.
        let ips: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("ips: ["))
            .collect();
        assert_eq!(ips.len(), 3300);
    }
}
