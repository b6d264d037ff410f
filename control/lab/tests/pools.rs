//! Node pools through the real CLI: three pools on separate underlays, one behind NAT,
//! wires across every pair of pools and one inside a pool. Every wire forwards; the
//! nodes route the other pools through their active gateway; a kill -9 of the active
//! gateway's daemon moves its pool to the standby and the wires forward again, while a
//! wire inside the pool loses nothing; when the first gateway is back, the pool moves
//! back to it; `lab down` leaves nothing, NAT router included.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::eventually;
use support::lab::{daemon_pid, namespaces_of, run, text, unique, Lab};

fn lab_file(name: &str) -> String {
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/pools.yaml"),
    )
    .unwrap();
    example.replace("name: pools", &format!("name: {name}"))
}

fn node<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == name)
        .unwrap()
}

fn kill9(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// `pod` pings `address` once, waiting at most half a second.
fn ping_once(lab: &Lab, pod: &str, address: &str) -> bool {
    lab.exec(pod, &["ping", "-c", "1", "-W", "0.5", address])
        .status
        .success()
}

/// The wires of examples/pools.yaml, as (pod, far address, what it crosses).
const WIRES: &[(&str, &str, &str)] = &[
    ("e1", "10.1.0.2", "east - west"),
    ("e1", "10.2.0.2", "east - edge (NAT)"),
    ("w1", "10.3.0.2", "west - edge (NAT)"),
    ("e1", "10.4.0.2", "inside east"),
];

#[test]
fn wires_cross_pools_through_their_gateways_and_move_to_the_standby() {
    let name = unique("tpool");
    let lab = Lab::up(&name, &lab_file(&name));
    for (pod, address, what) in WIRES {
        assert!(lab.pings(pod, address, 56), "{what}");
    }
    // Frames of the wire's whole MTU cross two gateways unfragmented.
    assert!(
        lab.pings("e1", "10.1.0.2", 1472),
        "a full 1500-byte frame, east - west"
    );

    let status = lab.status();
    assert_eq!(
        node(&status, "a3")["pool"]["active_gateway"],
        "a1",
        "{status:#}"
    );
    let edge = &node(&status, "c1")["pool"];
    assert_eq!(
        edge["tunnels_up"],
        serde_json::json!(["a1", "a2", "b1"]),
        "{edge}"
    );
    // a3 routes the other pools through a1 in the pools' table, read back by iproute2.
    let routes_west = || {
        let table = ["ip", "-d", "route", "show", "table", "900"];
        let routes = text(&lab_node_exec(&name, "a3", &table));
        let west = "172.31.3.0/24 via 172.31.1.1 dev underlay0 proto 120";
        assert!(routes.contains(west), "{routes}");
    };
    routes_west();
    let rules = text(&lab_node_exec(&name, "a3", &["ip", "rule"]));
    assert!(rules.contains("to 172.31.3.0/24 lookup 900"), "{rules}");

    // A route of the pools' table taken away by hand is what a pass over the node finds
    // other than the pools ask, and puts back. The pass asked for may find it already put
    // back: a pass also runs once the node is quiet after peer news, and peers still come
    // up here. Either pass logs the repair, so the log tells which one made it.
    let repairs = || {
        let logs = run(&["lab", "logs", "--lab", &name, "a3"]);
        assert!(logs.status.success(), "{}", text(&logs));
        text(&logs)
            .lines()
            .filter(|line| line.contains("reconcile: set as the pools ask"))
            .count()
    };
    let repairs_before = repairs();
    let deleted = lab_node_exec(
        &name,
        "a3",
        &["ip", "route", "del", "172.31.3.0/24", "table", "900"],
    );
    assert!(deleted.status.success(), "{}", text(&deleted));
    let socket = format!("/run/xwire/labs/{name}/nodes/a3/api.sock");
    let pass = run(&["--socket", &socket, "reconcile"]);
    assert!(pass.status.success(), "{}", text(&pass));
    assert!(
        text(&pass).contains("the pools' routes") || repairs() > repairs_before,
        "neither the pass nor the log says the route was put back: {}",
        text(&pass)
    );
    routes_west();

    // kill -9 of the active gateway (and of the supervisor first, so that a1 stays
    // down), with a wire inside the pool under traffic meanwhile.
    let supervisor: i32 = std::fs::read_to_string(format!("/run/xwire/labs/{name}/supervisor.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let inside = Command::new(env!("CARGO_BIN_EXE_xwirectl"))
        .args([
            "lab", "exec", "--lab", &name, "e1", "--", "ping", "-q", "-i", "0.01", "-c", "600",
            "10.4.0.2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    kill9(supervisor);
    let a1 = daemon_pid(&lab, "a1").expect("a1's daemon runs");
    kill9(a1);
    let killed = Instant::now();
    let moved = eventually(Duration::from_secs(20), || {
        ping_once(&lab, "e1", "10.1.0.2")
    });
    let failover = killed.elapsed();
    assert!(moved, "east - west did not come back through a2");
    eprintln!("failover: the first ping through the standby {failover:?} after the kill");
    assert_eq!(node(&lab.status(), "a3")["pool"]["active_gateway"], "a2");
    for (pod, address, what) in WIRES {
        assert!(lab.pings(pod, address, 56), "{what}, through the standby");
    }
    let inside = inside.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&inside.stdout);
    assert!(
        summary.contains("600 received, 0% packet loss"),
        "the wire inside east lost frames: {summary}"
    );

    // a1 back (started by hand: its supervisor is gone): the pool moves back to it.
    let mut back = start_daemon(&name, "a1");
    let returned = eventually(Duration::from_secs(20), || {
        node(&lab.status(), "a3")["pool"]["active_gateway"] == "a1"
    });
    assert!(returned, "east did not move back to a1");
    for (pod, address, what) in WIRES {
        assert!(lab.pings(pod, address, 56), "{what}, back through a1");
    }
    let _ = back.kill();
    let _ = back.wait();

    let down = run(&["lab", "down", "--lab", &name]);
    assert!(down.status.success(), "{}", text(&down));
    assert_eq!(namespaces_of(&name), Vec::<String>::new());
}

#[test]
fn vxlan_wires_cross_pools_through_their_gateways_too() {
    // The kernel's tunnel between two pools goes to the far node's address, which the
    // node routes through its pool's gateway as it does QUIC.
    let name = unique("tpvx");
    let yaml = lab_file(&name)
        .replace(
            "    ips: [10.1.0.1/30, 10.1.0.2/30]\n",
            "    ips: [10.1.0.1/30, 10.1.0.2/30]\n    carrier: vxlan\n",
        )
        .replace(
            "    ips: [10.4.0.1/30, 10.4.0.2/30]\n",
            "    ips: [10.4.0.1/30, 10.4.0.2/30]\n    carrier: vxlan\n",
        );
    assert_eq!(yaml.matches("carrier: vxlan").count(), 2, "{yaml}");
    let lab = Lab::up(&name, &yaml);
    let status = lab.status();
    for wire in status["wires"].as_array().unwrap() {
        assert_eq!(wire["state"], "up", "{status:#}");
    }
    let vxlan: Vec<&Value> = status["wires"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["carrier"] == "vxlan")
        .collect();
    assert_eq!(vxlan.len(), 2, "{status:#}");
    for (pod, address, crosses) in WIRES {
        let answers = eventually(Duration::from_secs(15), || ping_once(&lab, pod, address));
        assert!(answers, "{crosses}: {pod} -> {address}");
    }
    assert!(lab.pings("e1", "10.1.0.2", 1400), "east - west at 1400 B");
}

fn lab_node_exec(lab: &str, node: &str, command: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(["netns", "exec", &format!("xl.{lab}.n.{node}")])
        .args(command)
        .output()
        .unwrap()
}

/// Starts node `node`'s daemon in its namespace with its configuration, as the
/// supervisor would.
fn start_daemon(lab: &str, node: &str) -> Child {
    Command::new("ip")
        .args(["netns", "exec", &format!("xl.{lab}.n.{node}")])
        .arg(support::xwired())
        .args([
            "--config",
            &format!("/run/xwire/labs/{lab}/nodes/{node}/xwired.toml"),
        ])
        .env("XWIRE_LAB", lab)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn pool_mistakes_are_refused_before_anything_is_made() {
    let name = unique("tpbad");
    for (pools, expected) in [
        ("pools:\n  p: {nodes: [n1], gateways: [n1]}\n", "node n2 is in no pool"),
        ("pools:\n  p: {nodes: [n1, n2], gateways: [n3]}\n", "gateway n3 is not one of the pool's nodes"),
        ("pools:\n  p: {nodes: [n1], gateways: [n1]}\n  q: {nodes: [n2, n1], gateways: [n2]}\n", "is in pool"),
        ("pools:\n  p: {nodes: [n1], gateways: [n1], nat: true}\n  q: {nodes: [n2], gateways: [n2], nat: true}\n", "more than one pool is behind NAT"),
        ("pools:\n  p: {nodes: [n1, n2], gateways: []}\n", "has no gateway"),
    ] {
        let yaml = format!("name: {name}\nnodes: [n1, n2]\n{pools}");
        let lab = Lab::write(&name, &yaml);
        let out = run(&["lab", "up", lab.file.to_str().unwrap()]);
        assert!(!out.status.success());
        assert!(text(&out).contains(expected), "{pools}: {}", text(&out));
        assert!(namespaces_of(&name).is_empty());
    }
}
