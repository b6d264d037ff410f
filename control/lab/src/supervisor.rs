//! `xwirectl lab supervise NAME` (started by `lab up`): keeps one `xwired` running in each
//! node's namespace, as a DaemonSet would. A daemon that exits is started again, and its
//! wires come back through its own reconciliation. SIGTERM stops the daemons and the
//! supervisor; so does the lab's directory going away.

use std::fs::OpenOptions;
use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::file::Lab;
use super::namespaces;
use super::paths::LabPaths;
use super::up::Binaries;

const CHECK_EVERY: Duration = Duration::from_millis(100);
/// A daemon that exits sooner than this after its start waits `RESTART_PAUSE` before the
/// next, so a daemon that cannot start does not spin.
const QUICK_EXIT: Duration = Duration::from_secs(2);
const RESTART_PAUSE: Duration = Duration::from_secs(1);
const STOP_GRACE: Duration = Duration::from_secs(5);

struct Supervised {
    node: String,
    child: Option<Child>,
    started: Instant,
    not_before: Instant,
}

pub fn supervise(name: &str, binaries: &Binaries) -> Result<()> {
    let paths = LabPaths::new(name)?;
    let lab: Lab = serde_json::from_slice(
        &std::fs::read(paths.lab_file()).with_context(|| format!("lab {name} is not up"))?,
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let mut daemons: Vec<Supervised> = lab
        .nodes
        .iter()
        .map(|node| Supervised {
            node: node.clone(),
            child: None,
            started: Instant::now(),
            not_before: Instant::now(),
        })
        .collect();
    while !stop.load(Ordering::Relaxed) && paths.dir.exists() {
        for daemon in &mut daemons {
            let exited = match &mut daemon.child {
                None => true,
                Some(child) => match child.try_wait() {
                    Ok(None) => false,
                    Ok(Some(status)) => {
                        say(&format!("xwired on node {} exited ({status})", daemon.node));
                        if daemon.started.elapsed() < QUICK_EXIT {
                            daemon.not_before = Instant::now() + RESTART_PAUSE;
                        }
                        true
                    }
                    Err(e) => {
                        say(&format!("xwired on node {}: {e}", daemon.node));
                        true
                    }
                },
            };
            if exited {
                daemon.child = None;
                if Instant::now() >= daemon.not_before {
                    match start(&paths, binaries, &daemon.node) {
                        Ok(child) => {
                            say(&format!(
                                "xwired on node {} started (pid {})",
                                daemon.node,
                                child.id()
                            ));
                            daemon.child = Some(child);
                            daemon.started = Instant::now();
                        }
                        Err(e) => {
                            say(&format!("xwired on node {}: {e:#}", daemon.node));
                            daemon.not_before = Instant::now() + RESTART_PAUSE;
                        }
                    }
                }
            }
        }
        std::thread::sleep(CHECK_EVERY);
    }
    stop_all(&mut daemons);
    say("stopped");
    Ok(())
}

fn start(paths: &LabPaths, binaries: &Binaries, node: &str) -> Result<Child> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.node_log(node))?;
    let ns = namespaces::open(&paths.node_netns(node))?;
    let mut command = Command::new(&binaries.xwired);
    command
        .arg("--config")
        .arg(paths.node_config(node))
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // A process starts in the namespace of the thread that starts it.
    Ok(ns.run("start xwired", || command.spawn())??)
}

fn stop_all(daemons: &mut [Supervised]) {
    for child in daemons.iter().filter_map(|d| d.child.as_ref()) {
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
    }
    let deadline = Instant::now() + STOP_GRACE;
    for daemon in daemons {
        if let Some(child) = &mut daemon.child {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn say(line: &str) {
    let mut err = std::io::stderr();
    let _ = writeln!(err, "{} {line}", timestamp(chrono::Utc::now()));
}

/// RFC 3339 in UTC to the millisecond, as the daemons' own lines start, so the two logs
/// read and sort alike.
fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_starts_with_a_date_a_person_can_read() {
        let at = chrono::DateTime::from_timestamp_millis(1_796_000_000_123).unwrap();
        assert_eq!(super::timestamp(at), "2026-11-30T00:53:20.123Z");
    }
}
