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

/// The running lab's directory, and the file (in cargo's target directory) where the
/// demo notes which lab it started: the supervisor's pid, which names one lab's life (a
/// lab of the same name that someone brought up since has another).
const LAB_DIR: &str = "/run/xwire/labs/demo";
const STARTED: &str = "demo-lab-started";

fn supervisor_pid() -> Option<String> {
    std::fs::read_to_string(Path::new(LAB_DIR).join("supervisor.pid"))
        .ok()
        .map(|p| p.trim().to_owned())
}

fn started_here(target: &Path) -> bool {
    let noted = std::fs::read_to_string(target.join(STARTED)).ok();
    noted.is_some() && noted.map(|n| n.trim().to_owned()) == supervisor_pid()
}

fn remember_start(target: &Path) -> Result<()> {
    let pid = supervisor_pid().context("the demo lab has no supervisor pid")?;
    let file = target.join(STARTED);
    std::fs::write(&file, pid).with_context(|| format!("write {}", file.display()))
}

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
    // Where cargo builds (`CARGO_TARGET_DIR`, or `target/`): the binaries, and the
    // demo's own files.
    let target = target_dir()?;
    let xwirectl = target.join("release/xwirectl");
    let lab = |args: &[&str]| {
        let mut command = Command::new(&xwirectl);
        command.arg("lab").args(args);
        command
    };
    // A demo lab an earlier run left up goes first, and is said to; one that this task
    // did not start is left alone.
    if Path::new(LAB_DIR).exists() {
        if !started_here(&target) {
            bail!(
                "a lab named {LAB} is up that `cargo xtask demo` did not start: take it down yourself (xwirectl lab down --lab {LAB}) and run the demo again"
            );
        }
        println!("== taking down the {LAB} lab an earlier `cargo xtask demo` left up");
        run(&mut lab(&["down", "--lab", LAB]))?;
    }
    println!("== xwirectl lab up {LAB_FILE}");
    run(&mut lab(&["up", LAB_FILE]))?;
    remember_start(&target)?;

    println!("\n== a ping across every wire");
    let out = lab(&["status", "--lab", LAB, "--json"]).output()?;
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

    println!(
        "\n== xwirectl lab bench (each wire's loss-free rate beside a kernel VXLAN between the same nodes; 0.5 s per trial, the rate found held for 2 s)"
    );
    let chart = target.join("demo-bench.png");
    run(&mut lab(&[
        "bench",
        "--lab",
        LAB,
        "--seconds",
        "0.5",
        "--confirm-seconds",
        "2",
        "--chart",
        chart.to_str().unwrap_or("demo-bench.png"),
    ]))?;

    print_next_steps(&xwirectl);
    Ok(())
}

/// What to do with the lab the demo leaves up.
fn print_next_steps(xwirectl: &Path) {
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
