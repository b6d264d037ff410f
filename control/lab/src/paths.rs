//! Where a lab keeps its files and what its namespaces are called. Everything a lab makes
//! is found from its name alone, so `lab down` can clear away a lab whose processes all
//! died.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// Every lab's directory is under here (tmpfs: like the namespaces, gone at reboot).
pub(crate) const LABS_DIR: &str = "/run/xwire/labs";
/// Every lab namespace's name starts with this, then the lab name, then a '.': lab names
/// have no '.', so one lab's prefix never matches another's namespaces.
const NETNS_PREFIX: &str = "xl.";

/// The underlay subnet inside every lab's own namespace (labs never see each other's).
pub(crate) const UNDERLAY_PREFIX: &str = "172.31.0";
pub(crate) const UNDERLAY_MTU: u32 = 9500;
pub(crate) const NODE_PORT: u16 = 7470;

/// The file `lab up` writes first into a lab's directory: `down` removes only a
/// directory that holds it, so a name that once pointed elsewhere can never make it
/// remove something the lab did not make.
const MARKER: &str = ".xwire-lab";
/// Set in the environment of every process a lab starts (the supervisor, and through it
/// the daemons; plugin calls; traffic generators): how `down` tells them from a process
/// that merely names the lab's directory (a `tail -f` of a log).
pub(crate) const LAB_ENV: &str = "XWIRE_LAB";

#[derive(Debug, Clone)]
pub struct LabPaths {
    pub name: String,
    pub dir: PathBuf,
}

impl LabPaths {
    /// The paths of the lab `name`, which must follow the lab file's rule for names (so
    /// that it cannot leave `LABS_DIR` or reach into another lab's namespaces).
    pub fn new(name: &str) -> Result<LabPaths> {
        if let Err(e) = super::file::check_lab_name(name) {
            bail!("{e}");
        }
        Ok(LabPaths {
            name: name.into(),
            dir: Path::new(LABS_DIR).join(name),
        })
    }

    /// The paths of a checked lab (its name passed the rule when its file was parsed, or
    /// when it was read back from a running lab).
    pub fn of(lab: &super::file::Lab) -> LabPaths {
        LabPaths {
            name: lab.name.clone(),
            dir: Path::new(LABS_DIR).join(&lab.name),
        }
    }

    /// Marks the lab's directory (made now) as one a lab made.
    pub(crate) fn create_dir(&self) -> Result<()> {
        std::fs::create_dir_all(LABS_DIR)?;
        std::fs::create_dir(&self.dir)?;
        std::fs::write(self.dir.join(MARKER), format!("{}\n", self.name))?;
        Ok(())
    }

    /// Whether the lab's directory holds the mark `create_dir` left.
    pub(crate) fn is_marked(&self) -> bool {
        std::fs::read_to_string(self.dir.join(MARKER)).is_ok_and(|m| m.trim() == self.name)
    }

    /// The `LAB_ENV` entry of this lab, as `/proc/PID/environ` holds it.
    pub(crate) fn env_entry(&self) -> String {
        format!("{LAB_ENV}={}", self.name)
    }

    /// The checked lab as it runs (JSON).
    pub fn lab_file(&self) -> PathBuf {
        self.dir.join("lab.json")
    }

    pub fn supervisor_pid(&self) -> PathBuf {
        self.dir.join("supervisor.pid")
    }

    pub(crate) fn supervisor_log(&self) -> PathBuf {
        self.dir.join("supervisor.log")
    }

    pub(crate) fn certs_dir(&self) -> PathBuf {
        self.dir.join("certs")
    }

    pub(crate) fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    pub(crate) fn node_config(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("xwired.toml")
    }

    pub fn node_socket(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("api.sock")
    }

    /// The network namespace `lab up` ran in, bind-mounted here: the daemons open their
    /// metrics sockets in it, so that they are reached from the host.
    pub(crate) fn host_netns(&self) -> PathBuf {
        self.dir.join("host.netns")
    }

    pub fn node_log(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("xwired.log")
    }

    /// The namespace that holds the underlay bridge.
    pub(crate) fn lab_netns(&self) -> String {
        format!("{NETNS_PREFIX}{}", self.name)
    }

    pub fn node_netns(&self, node: &str) -> String {
        format!("{NETNS_PREFIX}{}.n.{node}", self.name)
    }

    /// The NAT router in front of pool `pool`.
    pub(crate) fn nat_netns(&self, pool: &str) -> String {
        format!("{NETNS_PREFIX}{}.g.{pool}", self.name)
    }

    pub fn pod_netns(&self, pod: &str) -> String {
        format!("{NETNS_PREFIX}{}.p.{pod}", self.name)
    }

    /// Whether `netns` is one of this lab's namespaces.
    pub(crate) fn owns_netns(&self, netns: &str) -> bool {
        netns == self.lab_netns() || netns.starts_with(&format!("{}.", self.lab_netns()))
    }

    /// The container id the lab gives a pod in its CNI calls.
    pub fn container_id(&self, pod: &str) -> String {
        format!("xwire-lab-{}-{pod}", self.name)
    }
}

/// The address of the `index`th node on the underlay.
pub(crate) fn underlay_address(index: usize) -> String {
    format!("{UNDERLAY_PREFIX}.{}", index + 1)
}

/// The names of the labs that have a directory (and a valid name).
pub(crate) fn labs_up() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(LABS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| super::file::check_lab_name(name).is_ok())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_owns_its_namespaces_and_not_those_of_a_lab_whose_name_starts_like_it() {
        let a = LabPaths::new("a").unwrap();
        let ab = LabPaths::new("a-b").unwrap();
        assert!(a.owns_netns(&a.node_netns("n1")));
        assert!(a.owns_netns(&a.pod_netns("r1")));
        assert!(a.owns_netns(&a.lab_netns()));
        assert!(!a.owns_netns(&ab.lab_netns()));
        assert!(!a.owns_netns(&ab.pod_netns("r1")));
        assert!(!ab.owns_netns(&a.pod_netns("b-r1")));
    }

    #[test]
    fn a_name_that_could_leave_the_labs_directory_is_refused() {
        for bad in [
            "/tmp/scratch",
            "..",
            "../etc",
            "a/b",
            "a.b",
            "",
            "A",
            "-a",
            "a\0b",
            "a-very-long-lab-name-over-24",
        ] {
            let e = LabPaths::new(bad).unwrap_err().to_string();
            assert!(e.contains("lab name"), "{bad:?}: {e}");
        }
        let ok = LabPaths::new("lab-1").unwrap();
        assert_eq!(ok.dir, Path::new(LABS_DIR).join("lab-1"));
    }
}
