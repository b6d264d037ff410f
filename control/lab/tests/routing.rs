//! The lab's routing through the real CLI: every pod on the management network (the
//! host reaches each pod, each pod the host and the other pods, across nodes, over IPv4
//! and IPv6, with addresses that stay through `lab edit`), static routes from the lab
//! file that carry traffic across a pod in router mode, the pods' MLD reports kept off
//! the management network, and nothing left on the host after `lab down`.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::eventually;
use support::lab::{run, text, unique, Lab};

fn lab_file(name: &str, with_r4: bool) -> String {
    let r4 = if with_r4 {
        "  r4: {node: node-b}\n"
    } else {
        ""
    };
    let r4_link = if with_r4 {
        "  - endpoints: [r4:eth1, r2:eth3]\n    ips: [10.0.24.2/30, 10.0.24.1/30]\n"
    } else {
        ""
    };
    format!(
        "name: {name}
nodes: [node-a, node-b]
pods:
  r1: {{node: node-a, policy_routing: true}}
  r2:
    node: node-a
    routes: [{{dst: 10.0.13.0/30, via: 10.0.12.1}}]
  r3:
    node: node-b
    routes: [{{dst: 10.0.12.0/30, via: 10.0.13.1}}]
{r4}links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: [10.0.12.1/30, 10.0.12.2/30]
  - endpoints: [r1:eth2, r3:eth1]
    ips: [10.0.13.1/30, 10.0.13.2/30]
{r4_link}"
    )
}

/// Pod name to its management addresses, from `lab status --json`.
fn mgmt_addresses(status: &Value) -> Vec<(String, String, String)> {
    status["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_owned(),
                p["mgmt"]["ipv4"].as_str().unwrap().to_owned(),
                p["mgmt"]["ipv6"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn host_pings(address: &str) -> bool {
    eventually(Duration::from_secs(10), || {
        Command::new("ping")
            .args(["-c", "1", "-W", "1", address])
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The packets counted by the rule of `node_netns`'s management bridge whose comment is
/// `rule` (what the pods' IPv6 sends of its own accord, dropped there).
fn chatter_dropped(node_netns: &str, rule: &str) -> u64 {
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            node_netns,
            "nft",
            "list",
            "table",
            "bridge",
            "xwire-mgmt",
        ])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let counted = listing
        .lines()
        .find(|line| line.contains(&format!("comment \"{rule}\"")))
        .and_then(|line| line.split("counter packets ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok());
    counted.unwrap_or_else(|| panic!("no counter for {rule} in {listing}"))
}

fn host_has_link(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .output()
        .unwrap()
        .status
        .success()
}

/// The lab of docs/routing.md, as `examples/routing.yaml` has it (its comments aside), is
/// the lab these tests bring up.
#[test]
fn the_routing_example_is_the_lab_tested_here() {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/routing.yaml");
    let example = std::fs::read_to_string(example).unwrap();
    let without_comments: String = example
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(without_comments, lab_file("routing", false));
}

#[test]
fn pods_are_on_the_management_network_and_static_routes_cross_a_router() {
    let name = unique("trt");
    let lab = Lab::up(&name, &lab_file(&name, false));
    let status = lab.status();
    let mgmt = &status["mgmt"];
    let bridge = mgmt["bridge"].as_str().unwrap().to_owned();
    let host_v4 = mgmt["host"]["ipv4"].as_str().unwrap().to_owned();
    let host_v6 = mgmt["host"]["ipv6"].as_str().unwrap().to_owned();
    let before = mgmt_addresses(&status);
    assert_eq!(before.len(), 3, "{status:#}");
    for (pod, v4, v6) in &before {
        assert!(host_pings(v4), "the host reaches {pod} at {v4}");
        assert!(host_pings(v6), "the host reaches {pod} at {v6}");
        assert!(lab.pings(pod, &host_v4, 56), "{pod} reaches the host");
    }
    // Across nodes: r3 (node-b) reaches r1 and r2 (node-a) on the management network.
    assert!(lab.pings("r3", &before[0].1, 56));
    assert!(lab.pings("r3", &before[1].2, 56));
    // The pods' MLD reports stop at their node's bridge: an address r1 adds sends some
    // (it joins the address's solicited-node group), and the rule that drops them
    // counts them.
    let node_a = format!("xl.{name}.n.node-a");
    let dropped = || chatter_dropped(&node_a, "mld reports");
    let earlier = dropped();
    let add = lab.exec(
        "r1",
        &["ip", "-6", "addr", "add", "fd00:99::5/128", "dev", "eth0"],
    );
    assert!(add.status.success(), "{}", text(&add));
    assert!(
        eventually(Duration::from_secs(5), || dropped() > earlier),
        "no MLD report of r1's was dropped at node-a's bridge"
    );
    // The pods' link-local addresses were probed, and the pods solicited routers, on a
    // network that has none: node-a's bridge kept both from the other pods.
    for rule in ["duplicate address probes", "router solicitations"] {
        assert!(
            eventually(Duration::from_secs(10), || chatter_dropped(&node_a, rule)
                > 0),
            "no {rule} were dropped at node-a's bridge"
        );
    }
    let table = text(&run(&["lab", "status", "--lab", &name]));
    assert!(table.contains(&before[2].1), "{table}");
    assert!(
        table.contains(&format!("this host: {host_v4}, {host_v6}")),
        "{table}"
    );

    // r3 reaches r2 through r1, by the static routes of r2 and r3 (r1 forwards).
    // Through /proc rather than sysctl(8): procps is not on every fresh machine.
    let forward = lab.exec(
        "r1",
        &["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"],
    );
    assert!(forward.status.success(), "{}", text(&forward));
    assert!(lab.pings("r3", "10.0.12.2", 56), "r3 -> r1 -> r2");
    // r1 is in router mode: a rule per addressed interface, read back by iproute2.
    let rules = text(&lab.exec("r1", &["ip", "-d", "rule", "show"]));
    assert!(
        rules.contains("from 10.0.12.1 lookup 1000 proto 120"),
        "{rules}"
    );
    assert!(
        rules.contains("from 10.0.13.1 lookup 1001 proto 120"),
        "{rules}"
    );

    // An edit adds a pod: it gets an address, the others keep theirs.
    std::fs::write(&lab.file, lab_file(&name, true)).unwrap();
    let edited = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(edited.status.success(), "{}", text(&edited));
    let after = mgmt_addresses(&lab.status());
    assert_eq!(&after[..3], &before[..], "addresses stay through an edit");
    let r4 = &after[3];
    assert_eq!(r4.0, "r4");
    assert!(host_pings(&r4.1));
    assert!(lab.pings("r4", &before[0].1, 56), "r4 reaches r1");

    // Down: the host's bridge and its ports go too.
    assert!(host_has_link(&bridge));
    let down = run(&["lab", "down", "--lab", &name]);
    assert!(down.status.success(), "{}", text(&down));
    assert!(!host_has_link(&bridge), "{bridge} is left on the host");
}

#[test]
fn a_lab_without_a_management_network_has_none() {
    let name = unique("tnm");
    let yaml = format!(
        "name: {name}\nmgmt: false\nnodes: [n1]\npods:\n  a: {{node: n1}}\n  b: {{node: n1}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n"
    );
    let lab = Lab::up(&name, &yaml);
    let status = lab.status();
    assert!(status.get("mgmt").is_none(), "{status:#}");
    let links = text(&lab.exec("a", &["ip", "-br", "link"]));
    assert!(!links.contains("eth0"), "{links}");
}

#[test]
fn a_management_network_that_cannot_be_is_refused_before_anything_is_made() {
    let name = unique("tmb");
    for (mgmt, expected) in [
        (
            "mgmt: {ipv4_subnet: 10.77.0.0/30}",
            "has room for 1 pods, the lab has 2",
        ),
        ("mgmt: {ipv4_subnet: 10.77.0.1/24}", "host bits"),
        ("mgmt: {ipv6_subnet: 10.77.0.0/24}", "other address family"),
        (
            "mgmt: {interface: eth1}",
            "a:eth1 is the management interface's name",
        ),
    ] {
        let yaml = format!(
            "name: {name}\n{mgmt}\nnodes: [n1]\npods:\n  a: {{node: n1}}\n  b: {{node: n1}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n"
        );
        let lab = Lab::write(&name, &yaml);
        let out = run(&["lab", "up", lab.file.to_str().unwrap()]);
        assert!(!out.status.success());
        assert!(text(&out).contains(expected), "{mgmt}: {}", text(&out));
        assert!(!std::path::Path::new("/run/xwire/labs").join(&name).exists());
    }
}
