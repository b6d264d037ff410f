//! Where a lab keeps its files and what its namespaces are called. Everything a lab makes
//! is found from its name alone, so `lab down` can clear away a lab whose processes all
//! died.

use std::path::{Path, PathBuf};

/// Every lab's directory is under here (tmpfs: like the namespaces, gone at reboot).
pub const LABS_DIR: &str = "/run/xwire/labs";
/// Named network namespaces, as `ip netns` keeps them.
pub const NETNS_DIR: &str = "/run/netns";
/// Every lab namespace's name starts with this, then the lab name, then a '.': lab names
/// have no '.', so one lab's prefix never matches another's namespaces.
const NETNS_PREFIX: &str = "xl.";

/// The underlay subnet inside every lab's own namespace (labs never see each other's).
pub const UNDERLAY_PREFIX: &str = "172.31.0";
pub const UNDERLAY_MTU: u32 = 9500;
pub const NODE_PORT: u16 = 7470;

#[derive(Debug, Clone)]
pub struct LabPaths {
    pub name: String,
    pub dir: PathBuf,
}

impl LabPaths {
    pub fn new(name: &str) -> LabPaths {
        LabPaths {
            name: name.into(),
            dir: Path::new(LABS_DIR).join(name),
        }
    }

    /// The checked lab as it runs (JSON).
    pub fn lab_file(&self) -> PathBuf {
        self.dir.join("lab.json")
    }

    pub fn supervisor_pid(&self) -> PathBuf {
        self.dir.join("supervisor.pid")
    }

    pub fn supervisor_log(&self) -> PathBuf {
        self.dir.join("supervisor.log")
    }

    pub fn certs_dir(&self) -> PathBuf {
        self.dir.join("certs")
    }

    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.dir.join("nodes").join(node)
    }

    pub fn node_config(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("xwired.toml")
    }

    pub fn node_socket(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("api.sock")
    }

    pub fn node_log(&self, node: &str) -> PathBuf {
        self.node_dir(node).join("xwired.log")
    }

    /// The namespace that holds the underlay bridge.
    pub fn lab_netns(&self) -> String {
        format!("{NETNS_PREFIX}{}", self.name)
    }

    pub fn node_netns(&self, node: &str) -> String {
        format!("{NETNS_PREFIX}{}.n.{node}", self.name)
    }

    pub fn pod_netns(&self, pod: &str) -> String {
        format!("{NETNS_PREFIX}{}.p.{pod}", self.name)
    }

    /// Whether `netns` is one of this lab's namespaces.
    pub fn owns_netns(&self, netns: &str) -> bool {
        netns == self.lab_netns() || netns.starts_with(&format!("{}.", self.lab_netns()))
    }

    /// The container id the lab gives a pod in its CNI calls.
    pub fn container_id(&self, pod: &str) -> String {
        format!("xwire-lab-{}-{pod}", self.name)
    }
}

/// The address of the `index`th node on the underlay.
pub fn underlay_address(index: usize) -> String {
    format!("{UNDERLAY_PREFIX}.{}", index + 1)
}

/// The names of the labs that have a directory.
pub fn labs_up() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(LABS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_owns_its_namespaces_and_not_those_of_a_lab_whose_name_starts_like_it() {
        let a = LabPaths::new("a");
        let ab = LabPaths::new("a-b");
        assert!(a.owns_netns(&a.node_netns("n1")));
        assert!(a.owns_netns(&a.pod_netns("r1")));
        assert!(a.owns_netns(&a.lab_netns()));
        assert!(!a.owns_netns(&ab.lab_netns()));
        assert!(!a.owns_netns(&ab.pod_netns("r1")));
        assert!(!ab.owns_netns(&a.pod_netns("b-r1")));
    }
}
