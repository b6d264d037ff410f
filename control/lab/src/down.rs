//! `xwirectl lab down`: removes everything a lab made, found from its name alone, so it
//! works after a crash or a `kill -9` of any part: the supervisor, every process started
//! for the lab (marked by `LAB_ENV` in its environment) or running in one of its
//! namespaces, the namespaces (which take their interfaces with them), and the lab's
//! directory (only one that carries the lab's mark).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::namespaces;
use super::paths::{self, LabPaths};

const SUPERVISOR_GRACE: Duration = Duration::from_secs(8);

/// What `down` removed.
#[derive(Debug, Default)]
pub struct Removed {
    pub containers: usize,
    pub processes: usize,
    pub namespaces: usize,
}

/// `2 containers and 3 processes stopped, 6 namespaces removed`.
impl std::fmt::Display for Removed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.containers > 0 {
            write!(f, "{} and ", counted(self.containers, "container"))?;
        }
        write!(
            f,
            "{} stopped, {} removed",
            counted(self.processes, "process"),
            counted(self.namespaces, "namespace")
        )
    }
}

/// `1 process`, `2 processes`, `0 namespaces`.
fn counted(n: usize, thing: &str) -> String {
    match (n, thing.ends_with('s')) {
        (1, _) => format!("1 {thing}"),
        (_, true) => format!("{n} {thing}es"),
        (_, false) => format!("{n} {thing}s"),
    }
}

/// Takes the lab `name` down; without a name, the only lab that is up.
pub fn down(name: Option<&str>) -> Result<(String, Removed)> {
    let name = match name {
        Some(name) => name.to_owned(),
        None => {
            let up = labs_present();
            match up.as_slice() {
                [one] => one.clone(),
                [] => bail!("no lab is up"),
                many => bail!("several labs are up ({}): name one", many.join(", ")),
            }
        }
    };
    let paths = LabPaths::new(&name)?;
    let owned = namespaces::all().into_iter().any(|n| paths.owns_netns(&n));
    if !paths.dir.exists() && !owned {
        bail!("no lab named {name} is up");
    }
    if paths.dir.exists() && !paths.is_marked() {
        bail!(
            "{} was not made by `xwirectl lab up` (it has no lab mark): left as it is",
            paths.dir.display()
        );
    }
    Ok((name, clear(&paths)))
}

/// Labs with a directory or a namespace left.
pub(crate) fn labs_present() -> Vec<String> {
    let mut names: HashSet<String> = paths::labs_up().into_iter().collect();
    for ns in namespaces::all() {
        if let Some(rest) = ns.strip_prefix("xl.") {
            names.insert(rest.split('.').next().unwrap_or(rest).to_owned());
        }
    }
    let mut names: Vec<String> = names.into_iter().collect();
    names.sort();
    names
}

/// Removes everything of the lab at `paths`; never fails (what cannot be removed now is
/// left for the next `down`).
pub fn clear(paths: &LabPaths) -> Removed {
    let mut removed = Removed::default();
    // The supervisor first, so that it does not start again what is stopped next.
    if let Some(pid) = supervisor_pid(paths) {
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + SUPERVISOR_GRACE;
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(pid) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        removed.processes += 1;
    }
    // Containers before the processes in the lab's namespaces: podman stops its own, and
    // forgets them.
    removed.containers = super::containers::remove_all(&paths.name);
    // The only interface of the lab's outside its namespaces.
    super::mgmt::remove_host_side(&paths.name);
    let lab_namespaces: Vec<String> = namespaces::all()
        .into_iter()
        .filter(|n| paths.owns_netns(n))
        .collect();
    let inodes: HashSet<u64> = lab_namespaces
        .iter()
        .filter_map(|n| std::fs::metadata(namespaces::netns_path(n)).ok())
        .map(|m| m.ino())
        .collect();
    let mark = paths.env_entry();
    for pid in other_processes() {
        let in_lab_netns = std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .map(|m| inodes.contains(&m.ino()))
            .unwrap_or(false);
        let started_for_lab = std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|&b| b == 0).any(|entry| entry == mark.as_bytes()))
            .unwrap_or(false);
        if in_lab_netns || started_for_lab {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            removed.processes += 1;
        }
    }
    for ns in &lab_namespaces {
        namespaces::remove(ns);
        removed.namespaces += 1;
    }
    // Only a directory a lab made: the name rule keeps `dir` under the labs' directory,
    // and the mark keeps a directory someone else put there.
    if paths.is_marked() {
        // A mount point cannot be removed: the host's namespace handle goes first (the
        // namespace itself is not touched).
        xwire_netns::named::remove(&paths.host_netns());
        let _ = std::fs::remove_dir_all(&paths.dir);
    }
    removed
}

/// The supervisor's pid, if the file names a live supervisor of this lab (a pid can be
/// reused by another process after a crash).
fn supervisor_pid(paths: &LabPaths) -> Option<Pid> {
    let pid: i32 = std::fs::read_to_string(paths.supervisor_pid())
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let is_ours = args
        .windows(2)
        .any(|w| w[0] == b"supervise" && w[1] == paths.name.as_bytes());
    is_ours.then(|| Pid::from_raw(pid))
}

/// Whether the lab at `paths` has a supervisor that runs.
pub(crate) fn supervisor_runs(paths: &LabPaths) -> bool {
    supervisor_pid(paths).is_some_and(alive)
}

fn alive(pid: Pid) -> bool {
    // A zombie still answers kill(0); its state says it is gone.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, None | Some(Some('Z')) | Some(None))
}

fn other_processes() -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir(Path::new("/proc"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_down_removed_is_said_with_the_right_plurals() {
        let removed = |containers, processes, namespaces| Removed {
            containers,
            processes,
            namespaces,
        };
        assert_eq!(
            removed(0, 1, 6).to_string(),
            "1 process stopped, 6 namespaces removed"
        );
        assert_eq!(
            removed(2, 3, 1).to_string(),
            "2 containers and 3 processes stopped, 1 namespace removed"
        );
    }
}
