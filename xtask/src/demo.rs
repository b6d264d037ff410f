//! `cargo xtask demo`: the standalone lab of examples/demo.yaml (two nodes, three pods,
//! one local and two remote wires) brought up with release builds, a ping across every
//! wire, a short bench, and the lab left up to look around.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cargo;
use crate::system::run;

const LAB_FILE: &str = "examples/demo.yaml";
const LAB: &str = "demo";

pub fn demo() -> Result<()> {
    run(cargo().args([
        "build",
        "--release",
        "--quiet",
        "-p",
        "xwire-control",
        "-p",
        "xwire-lab",
        "-p",
        "xwire-cni",
        "-p",
        "xwire-bench",
    ]))?;
    let xwirectl = target_dir()?.join("release/xwirectl");
    let lab = |args: &[&str]| {
        let mut command = Command::new(&xwirectl);
        command.arg("lab").args(args);
        command
    };
    // A demo lab from an earlier run goes first; "no lab named demo" is fine.
    let _ = lab(&["down", LAB]).output();
    println!("== xwirectl lab up {LAB_FILE}");
    run(&mut lab(&["up", LAB_FILE]))?;

    println!("\n== a ping across every wire");
    let out = lab(&["status", LAB, "--json"]).output()?;
    let status: Value = serde_json::from_slice(&out.stdout).context("read lab status")?;
    let mut failed = Vec::new();
    for wire in status["wires"].as_array().into_iter().flatten() {
        let (Some(pod), Some(ip)) = (
            wire["endpoints"][0]
                .as_str()
                .and_then(|e| e.split(':').next()),
            wire["ips"][1].as_str().and_then(|ip| ip.split('/').next()),
        ) else {
            continue;
        };
        let ping = lab(&[
            "exec", "--lab", LAB, pod, "--", "ping", "-c", "3", "-i", "0.2", "-W", "2", ip,
        ])
        .output()?;
        let said = String::from_utf8_lossy(&ping.stdout);
        let summary = said
            .lines()
            .filter(|l| l.contains("packet loss") || l.starts_with("rtt"))
            .collect::<Vec<_>>();
        println!(
            "uid {} {} -> {ip}: {}",
            wire["uid"],
            wire["endpoints"][0].as_str().unwrap_or("?"),
            summary.join("; ")
        );
        if !ping.status.success() {
            failed.push(format!("{pod} -> {ip}"));
        }
    }
    if !failed.is_empty() {
        bail!("no answer across: {}", failed.join(", "));
    }

    println!("\n== xwirectl lab bench (1 s per run)");
    let chart = Path::new("target").join("demo-bench.png");
    run(&mut lab(&[
        "bench",
        LAB,
        "--seconds",
        "1",
        "--chart",
        chart.to_str().unwrap_or("demo-bench.png"),
    ]))?;

    let bin = xwirectl.display();
    println!(
        "\nThe lab is still up. Look around:\n  \
         {bin} lab status\n  \
         {bin} lab exec r1 -- ip addr\n  \
         {bin} lab exec r1 -- ping 10.0.13.2\n  \
         {bin} lab bench --link 1\n\
         Tear it down:\n  \
         {bin} lab down"
    );
    Ok(())
}

fn target_dir() -> Result<PathBuf> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()?;
    let metadata: Value = serde_json::from_slice(&out.stdout).context("read cargo metadata")?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}
