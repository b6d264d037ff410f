//! Veth mode through a libcni client (the runner `cnitool.rs` builds): a chain of
//! macvlan + host-local (a primary whose pods cannot reach their node) and xwire with
//! `vethMode`. ADD gives the pod a veth to the node with routes to the node and the
//! service and cluster CIDRs, permanent neighbours on both sides and rp_filter set;
//! the node reaches the pod and the pod a service address on the node; CHECK names
//! what was broken; DEL takes it all away; a bad `vethMode`, or a `CNI_NETNS` that is
//! no network namespace (code 4), makes nothing.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use support::{build_cnitool, plugin_bin, start_node, Node, Pod, TempDir};
use xwire_testbed::Netns;

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sh(ns: &Netns, args: &[&str]) -> Output {
    ns.exec(Command::new(args[0]).args(&args[1..])).unwrap()
}

fn ok(ns: &Netns, args: &[&str]) -> String {
    let out = sh(ns, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(ns: &Netns, args: &[&str]) -> Vec<Value> {
    serde_json::from_str(&ok(ns, args)).unwrap_or_default()
}

/// `dst [via GW] dev DEV` of xwire's routes (proto 120) in the main table.
fn xwire_routes(ns: &Netns) -> Vec<String> {
    json(ns, &["ip", "-j", "-d", "route", "show", "proto", "120"])
        .iter()
        .map(|r| {
            let mut s = r["dst"].as_str().unwrap().to_owned();
            if let Some(gw) = r["gateway"].as_str() {
                s += &format!(" via {gw}");
            }
            s + &format!(" dev {}", r["dev"].as_str().unwrap())
        })
        .collect()
}

fn permanent_neighbours(ns: &Netns, dev: &str) -> Vec<String> {
    json(
        ns,
        &["ip", "-j", "neigh", "show", "dev", dev, "nud", "permanent"],
    )
    .iter()
    .map(|n| n["dst"].as_str().unwrap().to_owned())
    .collect()
}

/// The node's interfaces whose alias marks them as a pod's veth.
fn node_veths(node: &Node) -> Vec<String> {
    json(&node.ns, &["ip", "-j", "-d", "link", "show"])
        .iter()
        .filter(|l| {
            l["ifalias"]
                .as_str()
                .is_some_and(|a| a.starts_with("xwire-veth:"))
        })
        .map(|l| l["ifname"].as_str().unwrap().to_owned())
        .collect()
}

struct Chain {
    cnitool: PathBuf,
    conflist: PathBuf,
    bin: PathBuf,
    work: TempDir,
}

impl Chain {
    fn new(node: &Node, veth_mode: &str) -> Chain {
        let work = TempDir::new("vethmode");
        let cnitool = build_cnitool(&work.0);
        let bin = work.0.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(plugin_bin(), bin.join("xwire")).unwrap();
        let conflist = work.0.join("net.conflist");
        let chain = Chain {
            cnitool,
            conflist,
            bin,
            work,
        };
        chain.configure(node, veth_mode);
        chain
    }

    fn configure(&self, node: &Node, veth_mode: &str) {
        std::fs::write(
            &self.conflist,
            format!(
                r#"{{"cniVersion": "1.0.0", "name": "macnet", "plugins": [
  {{"type": "macvlan", "master": "up0", "mode": "bridge",
    "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "192.168.90.0/24",
               "rangeStart": "192.168.90.100", "rangeEnd": "192.168.90.150"}}]],
             "dataDir": "{data}"}}}},
  {{"type": "xwire", "socket": "{socket}", "namespace": "lab", "vethMode": {veth_mode}}}
]}}"#,
                data = self.work.0.join("ipam").display(),
                socket = node.socket.display()
            ),
        )
        .unwrap();
    }

    fn run(&self, node: &Node, command: &str, pod: &Pod) -> Output {
        let mut cmd = Command::new(&self.cnitool);
        cmd.args([command, self.conflist.to_str().unwrap(), &pod.netns()])
            .env("CNI_CONTAINERID", &pod.container)
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAME={}", pod.name),
            )
            .env("CNI_PATH", format!("{}:/usr/lib/cni", self.bin.display()))
            .env("CNI_CACHE_DIR", self.work.0.join("cache"));
        node.ns.exec(&mut cmd).unwrap()
    }
}

/// A node whose uplink `up0` (the macvlan parent) has 192.168.90.1/24 and the
/// default route, and a "service" address 10.96.0.10 on its loopback.
fn node() -> Node {
    let node = start_node("vm", "");
    for args in [
        // This kernel has no dummy interfaces: a veth whose other end stays unused.
        &[
            "ip", "link", "add", "up0", "type", "veth", "peer", "name", "up0p",
        ][..],
        &["ip", "addr", "add", "192.168.90.1/24", "dev", "up0"],
        &["ip", "link", "set", "up0p", "up"],
        &["ip", "link", "set", "up0", "up"],
        &["ip", "route", "add", "default", "dev", "up0"],
        &["ip", "addr", "add", "10.96.0.10/32", "dev", "lo"],
    ] {
        ok(&node.ns, args);
    }
    node
}

#[test]
fn veth_mode_wires_a_macvlan_pod_to_its_node_and_check_and_del_follow() {
    let node = node();
    let chain = Chain::new(
        &node,
        r#"{"serviceCIDRs": ["10.96.0.0/12"], "clusterCIDRs": ["10.244.0.0/16"]}"#,
    );
    let pod = Pod::new("vp");
    let added = chain.run(&node, "add", &pod);
    assert!(added.status.success(), "{}", text(&added));
    let result: Value = serde_json::from_slice(&added.stdout).unwrap();
    let pod_ip = result["ips"][0]["address"]
        .as_str()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let names: Vec<&str> = result["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"veth0"), "{result:#}");

    // The pod: routes through veth0 to the node (found from its default route) and the
    // CIDRs, the node's address at the node end's MAC, rp_filter loose.
    let mut routes = xwire_routes(&pod.ns);
    routes.sort();
    assert_eq!(
        routes,
        vec![
            "10.244.0.0/16 via 192.168.90.1 dev veth0",
            "10.96.0.0/12 via 192.168.90.1 dev veth0",
            "192.168.90.1 dev veth0",
        ]
    );
    assert_eq!(permanent_neighbours(&pod.ns, "veth0"), vec!["192.168.90.1"]);
    for ifname in ["veth0", "eth0"] {
        let value = ok(
            &pod.ns,
            &[
                "cat",
                &format!("/proc/sys/net/ipv4/conf/{ifname}/rp_filter"),
            ],
        );
        assert_eq!(value.trim(), "2", "{ifname}");
    }
    // The node: a route and a permanent neighbour to the pod's address.
    let veths = node_veths(&node);
    assert_eq!(veths.len(), 1, "{veths:?}");
    assert_eq!(
        xwire_routes(&node.ns),
        vec![format!("{pod_ip} dev {}", veths[0])]
    );
    assert_eq!(
        permanent_neighbours(&node.ns, &veths[0]),
        vec![pod_ip.clone()]
    );

    // What it is for: the node reaches its macvlan pod, and the pod a service address.
    let ping = |ns: &Netns, to: &str| {
        sh(ns, &["ping", "-c", "2", "-i", "0.2", "-W", "2", to])
            .status
            .success()
    };
    assert!(ping(&node.ns, &pod_ip), "the node reaches the pod");
    assert!(
        ping(&pod.ns, "10.96.0.10"),
        "the pod reaches a service address on the node"
    );

    let checked = chain.run(&node, "check", &pod);
    assert!(checked.status.success(), "{}", text(&checked));
    ok(&pod.ns, &["ip", "route", "del", "10.96.0.0/12"]);
    ok(&node.ns, &["ip", "neigh", "del", &pod_ip, "dev", &veths[0]]);
    let checked = chain.run(&node, "check", &pod);
    assert!(!checked.status.success());
    for expected in [
        "no route 10.96.0.0/12 via 192.168.90.1",
        &format!("no permanent neighbour {pod_ip}"),
    ] {
        assert!(
            text(&checked).contains(expected),
            "{expected}: {}",
            text(&checked)
        );
    }

    let deleted = chain.run(&node, "del", &pod);
    assert!(deleted.status.success(), "{}", text(&deleted));
    assert!(node_veths(&node).is_empty());
    assert!(xwire_routes(&node.ns).is_empty());
    assert!(!pod.has("veth0"));
}

#[test]
fn a_bad_veth_mode_is_invalid_config_and_makes_nothing() {
    let node = node();
    let chain = Chain::new(&node, r#"{"serviceCIDRs": ["10.96.0.0"]}"#);
    let pod = Pod::new("vb");
    let added = chain.run(&node, "add", &pod);
    assert!(!added.status.success());
    assert!(
        text(&added).contains("vethMode.serviceCIDRs"),
        "{}",
        text(&added)
    );
    assert!(node_veths(&node).is_empty());
    // A node it cannot find an address of: a clear error, nothing left.
    ok(&node.ns, &["ip", "route", "del", "default"]);
    chain.configure(&node, r#"{"serviceCIDRs": ["10.96.0.0/12"]}"#);
    let pod = Pod::new("vc");
    let added = chain.run(&node, "add", &pod);
    assert!(!added.status.success());
    assert!(
        text(&added).contains("set vethMode.nodeAddresses"),
        "{}",
        text(&added)
    );
    assert!(node_veths(&node).is_empty());
    assert!(!pod.has("veth0"));
}

#[test]
fn a_cni_netns_that_is_no_namespace_is_the_callers_error_in_veth_mode_and_makes_nothing() {
    let node = node();
    let work = TempDir::new("vethnetns");
    // A regular file where the pod's namespace should be (a runtime's stale path).
    let not_a_netns = work.0.join("netns");
    std::fs::write(&not_a_netns, b"").unwrap();
    let config = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "macnet",
        "type": "xwire",
        "socket": node.socket,
        "namespace": "lab",
        "vethMode": {"serviceCIDRs": ["10.96.0.0/12"]},
        "prevResult": {
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "eth0", "sandbox": not_a_netns}],
            "ips": [{"address": "192.168.90.120/24", "interface": 0}]
        }
    });
    let netns = not_a_netns.to_str().unwrap();
    let env = [
        ("CNI_CONTAINERID", "c-vz"),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=vz"),
    ];
    let added = support::plugin("ADD", &env, &config);
    assert_eq!(
        added.error_code(),
        Some(u64::from(xwire_proto::local::codes::INVALID_ENVIRONMENT)),
        "{}",
        added.output
    );
    let msg = added.output["msg"].as_str().unwrap_or_default();
    assert!(msg.contains("is not a network namespace"), "{msg}");
    assert!(node_veths(&node).is_empty());
    assert!(node.state().attachments.is_empty());
}
