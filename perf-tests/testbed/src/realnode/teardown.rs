//! What outlives a node's processes once they are killed, found and removed: containers
//! keep running under their shims when containerd and the kubelet die; the kubelet's
//! volumes and containerd's root file systems stay mounted; sandboxes' network
//! namespaces stay bound under `/run/netns`; the kubelet's cgroups stay behind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::processes;

/// Kills every shim that serves the containerd at `socket`, and everything it started.
pub fn kill_containers(socket: &Path) {
    let socket = socket.to_string_lossy().into_owned();
    let shims: BTreeSet<u32> = processes::all()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let text = String::from_utf8_lossy(&cmdline);
                text.contains("containerd-shim") && text.contains(&socket)
            })
        })
        .collect();
    processes::kill(&processes::with_descendants(shims));
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
