//! Rootful podman with its CNI backend, set up as on this machine it works (see
//! ../shared/clients/README.md): runc, cgroupfs, ulimits the VM allows, its own storage
//! and network config directories, and a busybox root filesystem (no image pull).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::TempDir;

pub struct Podman {
    pub dir: TempDir,
    pub network: String,
    bridge: String,
    rootfs: PathBuf,
}

impl Podman {
    /// A network `xwnet-<pid>` whose conflist chains `plugins` (JSON entries) after
    /// bridge + host-local on `subnet` (e.g. "10.199.80").
    pub fn new(plugin_bin: &Path, chained: &str, subnet: &str) -> Podman {
        for tool in ["podman", "runc", "busybox"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{tool} is not installed (cargo xtask test installs it)"
            );
        }
        let dir = TempDir::new("podman");
        let root = dir.0.clone();
        let network = format!("xwnet-{}", std::process::id());
        let bridge = format!("xwbr{:x}", std::process::id());
        for sub in ["bin", "net.d", "storage", "run", "tmp"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::copy(plugin_bin, root.join("bin/xwire")).unwrap();
        let rootfs = root.join("rootfs");
        make_rootfs(&rootfs);
        let nofile = hard_nofile();
        std::fs::write(
            root.join("containers.conf"),
            format!(
                r#"[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
[network]
network_backend = "cni"
default_network = "{network}"
cni_plugin_dirs = ["{bin}", "/usr/lib/cni"]
network_config_dir = "{netd}"
"#,
                bin = root.join("bin").display(),
                netd = root.join("net.d").display(),
            ),
        )
        .unwrap();
        std::fs::write(
            root.join(format!("net.d/{network}.conflist")),
            format!(
                r#"{{"cniVersion": "1.0.0", "name": "{network}", "plugins": [
  {{"type": "bridge", "bridge": "{bridge}", "isGateway": false, "ipMasq": false,
    "ipam": {{"type": "host-local", "routes": [],
             "ranges": [[{{"subnet": "{subnet}.0/24", "gateway": "{subnet}.1"}}]]}}}},
  {chained}
]}}"#
            ),
        )
        .unwrap();
        Podman {
            dir,
            network,
            bridge,
            rootfs,
        }
    }

    pub fn command(&self) -> Command {
        let root = &self.dir.0;
        let mut cmd = Command::new("podman");
        cmd.env("CONTAINERS_CONF", root.join("containers.conf"))
            .arg("--root")
            .arg(root.join("storage"))
            .arg("--runroot")
            .arg(root.join("run"))
            .arg("--tmpdir")
            .arg(root.join("tmp"));
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Starts a detached container named `name` on the network that sleeps until stopped.
    pub fn start(&self, name: &str) -> Output {
        self.command()
            .args(["run", "-d", "--name", name, "--network", &self.network])
            .args(["--cap-add", "NET_RAW", "--rootfs"])
            .arg(&self.rootfs)
            .args(["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"])
            .output()
            .unwrap()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.run(&["rm", "-af", "-t", "0"]);
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
        let _ = std::fs::remove_dir_all(format!("/var/lib/cni/networks/{}", self.network));
        if let Ok(entries) = std::fs::read_dir("/var/lib/cni/results") {
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{}-", self.network))
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
    }
}

fn make_rootfs(rootfs: &Path) {
    for sub in ["bin", "etc", "proc", "sys", "dev", "tmp", "run", "root"] {
        std::fs::create_dir_all(rootfs.join(sub)).unwrap();
    }
    let busybox = rootfs.join("bin/busybox");
    std::fs::copy("/bin/busybox", &busybox).unwrap();
    let list = Command::new(&busybox).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        let _ = std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet));
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n").unwrap();
}

/// The VM lacks CAP_SYS_RESOURCE, so containers may not raise nofile above this.
fn hard_nofile() -> u64 {
    let out = Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<u64>()
        .unwrap_or(1 << 20)
        .min(1 << 20)
}
