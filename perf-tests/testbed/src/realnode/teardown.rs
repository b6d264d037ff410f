//! What outlives a node's processes once they are killed, found and removed: containers
//! keep running under their shims when containerd and the kubelet die; the kubelet's
//! volumes and containerd's root file systems stay mounted; sandboxes' network
//! namespaces stay bound under `/run/netns`; the kubelet's cgroups stay behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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

pub(super) fn processes() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Kills every shim that serves the containerd at `socket`, and everything it started.
pub fn kill_containers(socket: &Path) {
    let socket = socket.to_string_lossy().into_owned();
    let all = processes();
    let mut doomed: BTreeSet<u32> = all
        .iter()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                text.contains("containerd-shim") && text.contains(&socket)
            })
        })
        .collect();
    // Descendants, to a fixed point: a process whose parent is doomed is doomed.
    loop {
        let more: Vec<u32> = all
            .iter()
            .copied()
            .filter(|pid| !doomed.contains(pid))
            .filter(|pid| parent_of(*pid).is_some_and(|parent| doomed.contains(&parent)))
            .collect();
        if more.is_empty() {
            break;
        }
        doomed.extend(more);
    }
    for pid in &doomed {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while doomed
        .iter()
        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        // mountinfo escapes spaces and such as octal; none of the node's paths has them.
        .map(PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect();
    found.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    found.dedup();
    found
}

/// Unmounts (detached) everything mounted under `dir`.
pub fn unmount_under(dir: &Path) {
    for _ in 0..3 {
        let points = mounts_under(dir);
        if points.is_empty() {
            return;
        }
        for point in points {
            let _ = nix::mount::umount2(&point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// The names in `/run/netns` now.
pub fn named_netns() -> BTreeSet<String> {
    std::fs::read_dir("/run/netns")
        .map(|dir| {
            dir.filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes the sandbox namespaces (`cni-…`) that were not there `before`.
pub fn remove_sandbox_netns(before: &BTreeSet<String>) {
    for name in named_netns().difference(before) {
        if name.starts_with("cni-") {
            let path = Path::new("/run/netns").join(name);
            let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The cgroup v1 hierarchies' `kubepods` directories (or v2's), which the kubelet makes
/// with the cgroupfs driver.
pub fn kubepods_cgroups() -> BTreeSet<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut found: BTreeSet<PathBuf> = std::fs::read_dir(root)
        .map(|dir| {
            dir.filter_map(|entry| Some(entry.ok()?.path().join("kubepods")))
                .filter(|path| path.is_dir())
                .collect()
        })
        .unwrap_or_default();
    if root.join("kubepods").is_dir() {
        found.insert(root.join("kubepods"));
    }
    found
}

/// Removes the `kubepods` cgroups that were not there `before`.
pub fn remove_kubepods_cgroups(before: &BTreeSet<PathBuf>) {
    remove_cgroup_trees(&kubepods_cgroups().difference(before).cloned().collect());
}

/// Removes each cgroup of `roots` and those under it, deepest first (a cgroup is
/// removed with `rmdir` once its processes are gone).
pub fn remove_cgroup_trees(roots: &BTreeSet<PathBuf>) {
    fn remove(dir: &Path) {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    remove(&entry.path());
                }
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
    for dir in roots {
        remove(dir);
    }
}
