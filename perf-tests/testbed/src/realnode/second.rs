//! A second node on the same machine, for wires that cross nodes: its own kubelet and
//! containerd in a network namespace of its own (joined to the host by a veth pair, so
//! its address is a real peer's) and a mount namespace of its own, where the host paths
//! the DaemonSet mounts (`/etc/cni/net.d`, `/opt/cni/bin`, `/run/xwire`,
//! `/var/lib/xwire`, `/var/log/xwire`) are this node's directories. So its xwired, in
//! the DaemonSet's pod, sees a node of its own. Its pods' cgroups are under
//! `/xwt-node2`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::{
    containerd_config, images, kubelet_config, primary_conflist, teardown, wait_until, RealNode,
    CNI_BIN_DIR, DAEMONSET_HOST_PATHS, NODE_IP, PRIMARY_PLUGINS, SERVICE_IP,
};
use crate::{ChildGuard, Netns};

pub const NODE2_NAME: &str = "xwt-node2";
pub const NODE2_IP: &str = "10.234.0.2";
const HOST_SIDE: &str = "10.234.0.1";
const PODS2: &str = "10.235.0.0/24";
const HOST_VETH: &str = "xwtnode2h";
const CGROUP_ROOT: &str = "/xwt-node2";

pub struct SecondNode {
    kubelet: Option<ChildGuard>,
    containerd: Option<ChildGuard>,
    holder: Option<ChildGuard>,
    holder_pid: u32,
    netns: Option<Netns>,
    socket: PathBuf,
    dir: PathBuf,
    kubelet_binary: PathBuf,
    cni_plugins: PathBuf,
}

fn run(cmd: &mut Command) -> Result<(), String> {
    super::run(cmd).map(drop)
}

impl SecondNode {
    /// Starts the node, joined to `first`'s API server, with `first`'s images and the
    /// image archives `more` loaded; waits until it is Ready.
    pub fn start(first: &RealNode, more: &[(&Path, &str)]) -> Result<SecondNode, String> {
        let dir = first.dir.0.join("node2");
        let netns = Netns::new("node2").map_err(|e| e.to_string())?;
        let mut node = SecondNode {
            kubelet: None,
            containerd: None,
            holder: None,
            holder_pid: 0,
            socket: dir.join("containerd.sock"),
            netns: Some(netns),
            dir,
            kubelet_binary: first.components.kubelet.clone(),
            cni_plugins: first.components.cni_plugins.clone(),
        };
        node.network()?;
        node.mounts()?;
        let pki_dir = node.dir.join("pki");
        let pki = first.pki.as_ref().expect("made at start");
        pki.issue_kubelet(&pki_dir, NODE2_NAME, NODE2_IP.parse().unwrap());
        pki.kubeconfig("kubelet", &format!("https://{NODE_IP}:6443"), &pki_dir);

        let mut containerd = node.in_node(&first.components.containerd);
        std::fs::write(
            node.dir.join("containerd.toml"),
            containerd_config(&node.dir.join("containerd"), &node.socket),
        )
        .map_err(|e| e.to_string())?;
        node.containerd = Some(
            node.spawn(
                "containerd",
                containerd
                    .arg("--config")
                    .arg(node.dir.join("containerd.toml")),
            )?,
        );
        let (ctr, socket) = (first.ctr.clone(), node.socket.clone());
        wait_until(
            "node 2's containerd answers",
            Duration::from_secs(30),
            || {
                Command::new(&ctr)
                    .arg("--address")
                    .arg(&socket)
                    .arg("version")
                    .output()
                    .is_ok_and(|out| out.status.success())
            },
        )?;
        for archive in &first.image_archives {
            images::load(&first.ctr, &node.socket, archive, None)?;
        }
        for (archive, base) in more {
            images::load(&first.ctr, &node.socket, archive, Some(base))?;
        }

        for controller in cgroup_controllers() {
            std::fs::create_dir_all(controller.join(&CGROUP_ROOT[1..]))
                .map_err(|e| e.to_string())?;
        }
        std::fs::write(
            node.dir.join("kubelet.yaml"),
            kubelet_config(NODE2_IP, &pki_dir, &node.socket, Some(CGROUP_ROOT)),
        )
        .map_err(|e| e.to_string())?;
        node.start_kubelet()?;
        wait_until("node 2 is Ready", Duration::from_secs(180), || {
            first.node_ready(NODE2_NAME)
        })
        .map_err(|e| format!("{e}\n{}", node.log("kubelet")))?;
        Ok(node)
    }

    /// The veth pair to the host, the node's routes, and the DNAT for the `kubernetes`
    /// Service inside its namespace; the host routes the node's pod range to it.
    fn network(&self) -> Result<(), String> {
        let ns = self.netns.as_ref().expect("held until drop");
        let name = ns.name();
        run(Command::new("ip").args([
            "link", "add", HOST_VETH, "type", "veth", "peer", "name", "eth0", "netns", name,
        ]))?;
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("{HOST_SIDE}/24"),
            "dev",
            HOST_VETH,
        ]))?;
        run(Command::new("ip").args(["link", "set", HOST_VETH, "up"]))?;
        run(Command::new("ip").args(["route", "add", PODS2, "via", NODE2_IP]))?;
        let inside = |args: &[&str]| run(Command::new("ip").args(["-n", name]).args(args));
        inside(&["addr", "add", &format!("{NODE2_IP}/24"), "dev", "eth0"])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        inside(&["route", "add", "default", "via", HOST_SIDE])?;
        ns.sysctl("net/ipv4/ip_forward", "1")
            .map_err(|e| e.to_string())?;
        let rules =
            super::host::service_dnat_rules("xwt_node2", SERVICE_IP, &format!("{NODE_IP}:6443"));
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let file = self.dir.join("dnat.nft");
        std::fs::write(&file, rules).map_err(|e| e.to_string())?;
        run(Command::new("ip")
            .args(["netns", "exec", name, "nft", "-f"])
            .arg(&file))
    }

    /// The mount namespace, held by a process that sleeps: `/` and `/run/netns` shared
    /// within it (the runtime's Bidirectional mount needs that), and the node's own
    /// directories bound over the DaemonSet's host paths.
    fn mounts(&mut self) -> Result<(), String> {
        for path in DAEMONSET_HOST_PATHS {
            std::fs::create_dir_all(self.own(path)).map_err(|e| e.to_string())?;
        }
        let holder = ChildGuard::spawn(
            Command::new("unshare")
                .args(["-m", "--propagation", "private", "sleep", "infinity"])
                .stdin(Stdio::null()),
        )
        .map_err(|e| format!("unshare: {e}"))?;
        let pid = self.holder.insert(holder).child().id();
        self.holder_pid = pid;
        let ours = std::fs::read_link("/proc/self/ns/mnt").map_err(|e| e.to_string())?;
        wait_until("node 2's mount namespace", Duration::from_secs(5), || {
            std::fs::read_link(format!("/proc/{pid}/ns/mnt")).is_ok_and(|theirs| theirs != ours)
        })?;
        let mnt = format!("--mount=/proc/{pid}/ns/mnt");
        let within = |args: &[&str]| run(Command::new("nsenter").arg(&mnt).args(args));
        within(&["mount", "--make-shared", "/"])?;
        within(&["mount", "--make-shared", "/run/netns"]).or_else(|_| {
            within(&[
                "mount",
                "--bind",
                "--make-shared",
                "/run/netns",
                "/run/netns",
            ])
        })?;
        for path in DAEMONSET_HOST_PATHS {
            within(&["mount", "--bind", &self.own(path).to_string_lossy(), path])?;
        }
        for plugin in PRIMARY_PLUGINS {
            let from = self.cni_plugins.join(plugin);
            std::fs::copy(&from, self.own(CNI_BIN_DIR).join(plugin)).map_err(|e| e.to_string())?;
        }
        std::fs::write(
            self.own(super::CONFLIST),
            primary_conflist(PODS2, &self.dir.join("cni-ipam")),
        )
        .map_err(|e| e.to_string())
    }

    /// `binary`, to be run inside the node's mount and network namespaces (nsenter
    /// execs it: the process is the binary's own).
    fn in_node(&self, binary: &Path) -> Command {
        let pid = self.holder_pid;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--mount=/proc/{pid}/ns/mnt"))
            .arg(format!(
                "--net={}",
                self.netns.as_ref().expect("held").path().display()
            ))
            .arg(binary);
        cmd
    }

    fn spawn(&self, name: &str, cmd: &mut Command) -> Result<ChildGuard, String> {
        let log = super::log_file(&self.dir, name)?;
        ChildGuard::spawn(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log))
            .map_err(|e| format!("starting node 2's {name}: {e}"))
    }

    /// The node's own directory or file for host path `path`, as the host sees it.
    fn own(&self, path: &str) -> PathBuf {
        self.dir.join("host").join(path.trim_start_matches('/'))
    }

    /// The node's primary conflist, as the host sees it.
    pub fn conflist(&self) -> PathBuf {
        self.own(super::CONFLIST)
    }

    /// Where the node's `xwire` plugin is installed, as the host sees it.
    pub fn plugin(&self) -> PathBuf {
        self.own(CNI_BIN_DIR).join("xwire")
    }

    /// The last lines node 2's `name` logged.
    pub fn log(&self, name: &str) -> String {
        super::log_tail(&self.dir, name)
    }

    /// The node's kubelet (again, after `lose`).
    pub fn start_kubelet(&mut self) -> Result<(), String> {
        let mut cmd = self.in_node(&self.kubelet_binary);
        cmd.arg("--config")
            .arg(self.dir.join("kubelet.yaml"))
            .arg("--kubeconfig")
            .arg(self.dir.join("pki/kubelet.kubeconfig"))
            .arg("--root-dir")
            .arg(self.dir.join("kubelet"))
            .args(["--node-ip", NODE2_IP, "--hostname-override", NODE2_NAME]);
        self.kubelet = Some(self.spawn("kubelet", &mut cmd)?);
        Ok(())
    }

    /// The node goes down as a machine would: its kubelet and every container on it
    /// killed at once (containerd stays, as after a reboot its state is empty of
    /// running tasks). `start_kubelet` brings it back.
    pub fn lose(&mut self) {
        drop(self.kubelet.take());
        teardown::kill_containers(&self.socket);
    }
}

fn cgroup_controllers() -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup")
        .map(|dir| {
            dir.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir() && !p.is_symlink())
                .collect()
        })
        .unwrap_or_default()
}

impl Drop for SecondNode {
    fn drop(&mut self) {
        drop(self.kubelet.take());
        teardown::kill_containers(&self.socket);
        drop(self.containerd.take());
        // The mount namespace, and with it every mount the node made, ends with its
        // last process.
        drop(self.holder.take());
        drop(self.netns.take());
        let _ = Command::new("ip").args(["link", "del", HOST_VETH]).output();
        let roots: std::collections::BTreeSet<PathBuf> = cgroup_controllers()
            .into_iter()
            .map(|c| c.join(&CGROUP_ROOT[1..]))
            .collect();
        teardown::remove_cgroup_trees(&roots);
    }
}
