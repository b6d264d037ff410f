//! Commands, root and Debian packages.

use std::process::Command;

use anyhow::{bail, Context, Result};

/// Debian packages to build the workspace: libbpf/libxdp (built from source by xsk-rs)
/// want m4, libelf, zlib, libpcap, pkg-config, clang and llvm.
const BUILD: &[&str] = &[
    "build-essential",
    "pkg-config",
    "m4",
    "libelf-dev",
    "zlib1g-dev",
    "libpcap-dev",
    "clang",
    "llvm",
];

/// What the demo runs besides the build: ip and ping, the font of its bench chart, and
/// nft (a lab's management network keeps the pods' IPv6 chatter off it with rules).
const DEMO: &[&str] = &["iproute2", "iputils-ping", "fonts-dejavu-core", "nftables"];

/// What the tests run besides the demo's: iperf3 (the remote-wire scenario's TCP
/// transfer); podman with its CNI backend (runc, conmon, catatonit, the reference
/// plugins, a static busybox for root filesystems and images) and a libcni runner built
/// with Go, for the CNI and container tests.
const TEST: &[&str] = &[
    "iperf3",
    "podman",
    "runc",
    "conmon",
    "catatonit",
    "containernetworking-plugins",
    "busybox-static",
    "golang-go",
    "golang-github-appc-cni-dev",
    // A test traces the system calls that create key files and the API socket.
    "strace",
    // The Kubernetes-mode tests run a real etcd beside kube-apiserver (which no package
    // ships: those tests are skipped, with the reason, where it is missing), and make
    // the service-account signing key with openssl.
    "etcd-server",
    "openssl",
    // The capture tests read their pcapng files with Wireshark's own reader.
    "tshark",
    // `lab up` pulls images: its test pulls from a registry on loopback.
    "docker-registry",
];

/// What a task needs installed.
#[derive(Clone, Copy)]
pub enum Need {
    Build,
    Demo,
    Test,
}

impl Need {
    fn packages(self) -> Vec<&'static str> {
        let sets: &[&[&str]] = match self {
            Need::Build => &[BUILD],
            Need::Demo => &[BUILD, DEMO],
            Need::Test => &[BUILD, DEMO, TEST],
        };
        sets.concat()
    }
}

pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd.status().with_context(|| format!("start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

fn is_root() -> bool {
    // The effective uid, from procfs, to avoid a libc dependency for one call.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

pub fn ensure_root(why: &str) -> Result<()> {
    if !is_root() {
        bail!("run as root: {why}");
    }
    Ok(())
}

fn missing_packages(need: Need) -> Vec<&'static str> {
    need.packages()
        .into_iter()
        .filter(|p| {
            let out = Command::new("dpkg-query").args(["-W", "-f=${Status}", p]).output();
            !matches!(out, Ok(o) if String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        })
        .collect()
}

pub fn ensure_packages(need: Need) -> Result<()> {
    let missing = missing_packages(need);
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing Debian packages; install them with: sudo apt-get install -y {}",
            missing.join(" ")
        );
    }
    eprintln!("installing {}", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}
