//! The control plane's test nodes and pods (`xwire_testbed::cluster`) bound to
//! this build's binaries, and topologies the tests share.
#![allow(dead_code)] // each test file uses its own part of this

#[allow(unused_imports)]
pub use xwire_testbed::apiserver;
pub mod podman;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use serde_json::Value;
use xwire_testbed::cluster::built_beside;
#[allow(unused_imports)]
pub use xwire_testbed::cluster::{certs_toml, eventually, write_certs, Outcome, Pod, TempDir};
use xwire_testbed::Netns;

pub fn xwired() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_xwired"))
}

/// The plugin binary, built next to `xwired`.
pub fn plugin_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    built_beside(&BUILD, &xwired(), "xwire-cni", "xwire")
}

/// `xwirectl`, built next to `xwired`.
pub fn xwirectl_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    built_beside(&BUILD, &xwired(), "xwire-lab", "xwirectl")
}

/// What `xwirectl ca-secret` prints: the cluster CA as a Secret, as deploy/README.md
/// makes it.
pub fn ca_secret() -> String {
    let out = std::process::Command::new(xwirectl_bin())
        .arg("ca-secret")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

pub type Node = xwire_testbed::cluster::Node;

pub fn start_node(name: &str, extra: &str) -> Node {
    Node::start(&xwired(), name, extra)
}

pub fn start_node_in(ns: Netns, name: &str, extra: &str) -> Node {
    Node::start_in(&xwired(), ns, name, extra)
}

pub fn plugin(command: &str, env: &[(&str, &str)], config: &Value) -> Outcome {
    xwire_testbed::cluster::plugin(&plugin_bin(), command, env, config)
}

pub fn plugin_raw(command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    xwire_testbed::cluster::plugin_raw(&plugin_bin(), command, env, stdin)
}

/// Calls the plugin for a pod.
pub fn call(pod: &Pod, command: &str, config: &Value) -> Outcome {
    pod.call(&plugin_bin(), command, config)
}

/// CHECK of `pod`, which is to find it not as its topology says (code 105): the message
/// that names what differs.
#[allow(dead_code)] // not every test file checks
pub fn failed_check(pod: &Pod, config: &Value) -> String {
    let checked = call(pod, "CHECK", config);
    assert_eq!(
        checked.error_code(),
        Some(u64::from(xwire_proto::local::codes::CHECK_FAILED)),
        "{}",
        checked.output
    );
    checked.output["msg"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}
/// Two pods' Topology objects joined by one link per entry of `links`:
/// (uid, r1's interface and address, r2's interface and address).
pub fn pair_topology(a: &str, b: &str, links: &[(u64, &str, &str, &str, &str)]) -> String {
    let side = |me: &str, peer: &str, mine: bool| {
        let mut text = format!(
            "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {me}, namespace: lab}}\nspec:\n  links:\n"
        );
        for (uid, a_if, a_ip, b_if, b_ip) in links {
            let (li, lip, pi, pip) = if mine {
                (a_if, a_ip, b_if, b_ip)
            } else {
                (b_if, b_ip, a_if, a_ip)
            };
            text += &format!(
                "  - {{uid: {uid}, peer_pod: {peer}, local_intf: {li}, peer_intf: {pi}, local_ip: {lip}, peer_ip: {pip}}}\n"
            );
        }
        text
    };
    format!("{}---\n{}", side(a, b, true), side(b, a, false))
}

/// The underlay addresses of `two_nodes`' n1 and n2.
pub const N1_IP: &str = "192.168.77.1";
pub const N2_IP: &str = "192.168.77.2";

/// `yaml`'s Topology objects with each of `pods` placed on the node at its address (the
/// Topology's `status.src_ip`, as the owning node writes it in a cluster and the lab file
/// gives it): a wire between nodes is told and taken only where its pods are placed.
pub fn placed(yaml: &str, pods: &[(&str, &str)]) -> String {
    yaml.split("---\n")
        .map(|doc| {
            let at = pods
                .iter()
                .find(|(pod, _)| doc.contains(&format!("metadata: {{name: {pod}, ")));
            match at {
                Some((_, ip)) => format!("{doc}status: {{src_ip: {ip}}}\n"),
                None => doc.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Two nodes, n1 and n2, each a namespace with its own daemon, joined by an underlay
/// veth (192.168.77.1 and .2) and knowing each other as peers; certificates in `certs`.
pub fn two_nodes(certs: &TempDir) -> (Node, Node) {
    two_nodes_configured(certs, "")
}

/// Two nodes whose `xwired.toml` has `extra` besides what `two_nodes` writes.
pub fn two_nodes_configured(certs: &TempDir, extra: &str) -> (Node, Node) {
    use xwire_testbed::cluster::{node_pair, TEST_FRAMES_PER_PORT};
    node_pair(
        &xwired(),
        certs,
        ["n1", "n2"],
        "192.168.77",
        (64, TEST_FRAMES_PER_PORT),
        extra,
    )
    .unwrap()
}

/// Stores Topology objects (a file of YAML or JSON) straight into a stopped node's store,
/// with `xwirectl topology apply --state-dir`.
pub fn apply_offline(node: &Node, file: &std::path::Path) {
    let out = try_apply_offline(node, file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `xwirectl topology apply --state-dir` into `node`'s store says and does.
pub fn try_apply_offline(node: &Node, file: &std::path::Path) -> std::process::Output {
    Command::new(xwirectl_bin())
        .args(["topology", "apply", "--state-dir"])
        .arg(node.dir.0.join("state"))
        .arg(file)
        .output()
        .unwrap()
}

/// Builds the libcni runner in `tests/cnitool` (from Debian's libcni source) into `dir`.
pub fn build_cnitool(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cnitool");
    let binary = dir.join("cnitool");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(&source)
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOFLAGS", "")
        .env("GOCACHE", dir.join("gocache"))
        .output()
        .expect("go is not installed (cargo xtask test installs golang-go)");
    assert!(
        out.status.success(),
        "building cnitool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// `pods` pods named `<prefix>0`, `<prefix>1`, ... in a ring in namespace `lab`: pod i's
/// eth1 is wired to pod i+1's eth2; even pods run on node 1 (`N1_IP`), odd ones on node 2.
pub fn ring_topology(prefix: &str, pods: usize) -> String {
    (0..pods)
        .map(|i| {
            let (next, prev) = ((i + 1) % pods, (i + pods - 1) % pods);
            format!(
                "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {prefix}{i}, namespace: lab}}\nspec:\n  links:\n  - {{uid: {i}, peer_pod: {prefix}{next}, local_intf: eth1, peer_intf: eth2}}\n  - {{uid: {prev}, peer_pod: {prefix}{prev}, local_intf: eth2, peer_intf: eth1}}\nstatus: {{src_ip: {}}}\n",
                if i % 2 == 0 { N1_IP } else { N2_IP }
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}
