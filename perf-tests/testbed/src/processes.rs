//! Processes by their place in the process tree, read from /proc: for taking down what a
//! run started when its own guards cannot (a container's shims outlive containerd; a
//! run ended by a signal never drops its guards).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` has ended: it is gone, or a zombie that its parent has yet to reap
/// (which a run taken down by a signal never does).
pub fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X")
    })
}

/// Every process now that has not ended.
pub fn all() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .filter(|pid| !ended(*pid))
                .collect()
        })
        .unwrap_or_default()
}

/// `roots` and every process below them.
pub fn with_descendants(roots: BTreeSet<u32>) -> BTreeSet<u32> {
    let all = all();
    let mut found = roots;
    // To a fixed point: a process whose parent is found is found.
    loop {
        let more: Vec<u32> = all
            .iter()
            .copied()
            .filter(|pid| !found.contains(pid))
            .filter(|pid| parent_of(*pid).is_some_and(|parent| found.contains(&parent)))
            .collect();
        if more.is_empty() {
            return found;
        }
        found.extend(more);
    }
}

/// SIGKILLs `pids` and waits (up to 10 s) until they are gone.
pub fn kill(pids: &BTreeSet<u32>) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|pid| !ended(*pid)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}
