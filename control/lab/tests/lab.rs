//! `xwirectl lab`: the real CLI, daemons, plugin and namespaces. Every lab a test makes
//! has a unique name and is taken down when the test ends, also when it fails.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::lab::{
    daemon_pid, demo, namespaces_of, processes_mentioning, run, text, unique, xwirectl, Lab,
};
use support::metrics::{scrape, value};
use support::{eventually, TempDir};

/// Nothing of lab `name` is left: no namespace, no directory, no process.
fn assert_gone(name: &str) {
    assert_eq!(namespaces_of(name), Vec::<String>::new());
    assert!(!Path::new("/run/xwire/labs").join(name).exists());
    let mark = format!("/run/xwire/labs/{name}/");
    assert!(
        eventually(Duration::from_secs(5), || processes_mentioning(&mark)
            .is_empty()),
        "processes of lab {name} are left"
    );
}

fn wires_up(status: &Value) -> bool {
    status["wires"]
        .as_array()
        .unwrap()
        .iter()
        .all(|w| w["state"] == "up")
}

/// After pings across the remote wire 1 (r1:eth2 on node-a to r3:eth1 on node-b): the
/// switch's counters in `lab status --json`, in `xwirectl wires` of node-a, and in
/// node-a's metrics endpoint.
fn the_switch_counts_the_remote_wire_and_serves_it_as_metrics(lab: &Lab) {
    let status = lab.status();
    let wire = &status["wires"][1];
    assert_eq!(wire["endpoints"][0], "r1:eth2", "{wire:#}");
    let [r1, r3] = [&wire["switch"][0], &wire["switch"][1]];
    assert_eq!(
        (r1["path"].as_str(), r3["path"].as_str()),
        (Some("remote"), Some("remote"))
    );
    // The pings of both sizes went through the switch.
    assert!(r1["egress"]["frames"].as_u64().unwrap() >= 2, "{wire:#}");
    assert!(r3["ingress"]["frames"].as_u64().unwrap() >= 2, "{wire:#}");
    assert!(r1["egress"]["drops"]["no_link"].is_u64(), "{wire:#}");
    assert!(wire["switch"].is_array() && status["wires"][0]["switch"][0].is_null());
    let node_a = &status["nodes"][0];
    assert_eq!(node_a["peers"][0]["node"], "node-b", "{node_a:#}");
    assert_eq!(node_a["peers"][0]["up"], true, "{node_a:#}");
    // The lab's daemons run as root here, so each worker took the default nice value.
    assert_eq!(
        node_a["worker_nice"],
        serde_json::json!([-20]),
        "{node_a:#}"
    );

    let socket = format!("/run/xwire/labs/{}/nodes/node-a/api.sock", lab.name);
    let wires = run(&["--socket", &socket, "wires", "--json"]);
    assert!(wires.status.success(), "{}", text(&wires));
    let wires: Value = serde_json::from_str(&text(&wires)).unwrap();
    let end = wires["counters"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|end| end["pod"] == "r1" && end["uid"] == 1)
        .unwrap_or_else(|| panic!("{wires:#}"));
    assert!(end["egress"]["frames"].as_u64().unwrap() >= 2, "{end:#}");
    let table = text(&run(&["--socket", &socket, "wires"]));
    assert!(
        table
            .lines()
            .any(|l| l.contains(" r1 ") && l.contains("r3@node-b") && l.contains("remote")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("worker busy") && l.ends_with("(nice -20)")),
        "{table}"
    );

    let url = node_a["metrics"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{node_a:#}");
    let samples = scrape(url);
    let r1_out = [
        ("namespace", lab.name.as_str()),
        ("pod", "r1"),
        ("interface", "eth2"),
        ("uid", "1"),
        ("direction", "egress"),
    ];
    let frames = value(&samples, "xwire_link_frames_total", &r1_out).expect("r1's frames");
    assert!(frames >= 2.0, "{frames}");
    let bytes = value(&samples, "xwire_link_bytes_total", &r1_out).unwrap();
    assert!(bytes >= frames * 60.0, "{bytes}");
    let drops = [r1_out.as_slice(), &[("reason", "tx_full")]].concat();
    assert!(value(&samples, "xwire_link_drops_total", &drops).is_some());
    assert_eq!(
        value(&samples, "xwire_peer_up", &[("peer", "node-b")]),
        Some(1.0)
    );
    // The lab's ADD calls went to node-a's daemon, and it has reconciled since.
    let adds = value(
        &samples,
        "xwire_cni_call_duration_seconds_count",
        &[("command", "add")],
    );
    assert!(adds.unwrap_or(0.0) >= 1.0, "{adds:?}");
    assert!(value(&samples, "xwire_reconcile_pass_duration_seconds_count", &[]).unwrap() >= 1.0);
    let busy = value(&samples, "xwire_worker_busy_ratio", &[]).unwrap();
    assert!((0.0..=1.0).contains(&busy), "{busy}");
    assert_eq!(
        value(&samples, "xwire_worker_nice", &[("worker", "0")]),
        Some(-20.0)
    );
}

#[test]
fn a_lab_comes_up_forwards_on_every_wire_and_goes_down_without_a_trace() {
    let name = unique("tup");
    // r1 calls its eth2 by a router's name, as an imported SR Linux node would.
    let file = demo(&name).replace(
        "r1: {node: node-a}",
        "r1: {node: node-a, interface_names: {eth2: ethernet-1/2}}",
    );
    let lab = Lab::up(&name, &file);
    let status = lab.status();
    assert!(wires_up(&status), "{status:#}");
    assert!(status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["daemon_up"] == true));
    let kinds: Vec<(&str, &str)> = status["wires"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["kind"].as_str().unwrap(), w["carrier"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("local", "veth"),
            ("remote", "datagram"),
            ("remote", "stream")
        ]
    );

    assert!(lab.pings("r1", "10.0.12.2", 56), "local wire");
    assert!(lab.pings("r1", "10.0.13.2", 56), "remote wire, datagrams");
    assert!(
        lab.pings("r1", "10.0.13.2", 8000),
        "remote wire, jumbo frames"
    );
    assert!(lab.pings("r3", "10.0.23.1", 56), "remote wire, stream");
    let counters = &lab.status()["wires"][1]["counters"];
    assert!(
        counters[0]["tx_packets"].as_u64().unwrap() >= 3,
        "{counters}"
    );
    assert!(
        counters[1]["rx_packets"].as_u64().unwrap() >= 3,
        "{counters}"
    );
    let table = text(&run(&["lab", "status", "--lab", &name]));
    assert!(
        table.contains("r1:eth2 (ethernet-1/2) <-> r3:eth1"),
        "{table}"
    );
    assert_eq!(
        lab.status()["wires"][1]["interface_names"],
        serde_json::json!(["ethernet-1/2", null])
    );
    the_switch_counts_the_remote_wire_and_serves_it_as_metrics(&lab);

    // exec passes the command's exit code on.
    assert_eq!(
        lab.exec("r2", &["sh", "-c", "exit 3"]).status.code(),
        Some(3)
    );
    let missing = lab.exec("r2", &["no-such-program-here"]);
    assert!(!missing.status.success());
    assert!(
        text(&missing).contains("no-such-program-here"),
        "{}",
        text(&missing)
    );

    // In several pods at once: each line after its pod's name, in the pods' order.
    let everywhere = run(&[
        "lab", "exec", "--lab", &name, "--all", "--", "sh", "-c", "echo hi",
    ]);
    assert!(everywhere.status.success(), "{}", text(&everywhere));
    assert_eq!(
        String::from_utf8_lossy(&everywhere.stdout),
        "[r1] hi\n[r2] hi\n[r3] hi\n"
    );
    let failing = run(&[
        "lab",
        "exec",
        "--lab",
        &name,
        "--all",
        "--",
        "sh",
        "-c",
        "test $(hostname) = nope",
    ]);
    assert_eq!(failing.status.code(), Some(1), "{}", text(&failing));
    assert!(
        text(&failing).contains("failed in r1"),
        "{}",
        text(&failing)
    );
    let nobody = run(&[
        "lab",
        "exec",
        "--lab",
        &name,
        "--label",
        "role=spine",
        "--",
        "true",
    ]);
    assert!(!nobody.status.success());
    assert!(text(&nobody).contains("role=spine"), "{}", text(&nobody));
    // Bare namespaces have no image, so nothing saves them, and save says so.
    let saved = run(&["lab", "save", "--lab", &name]);
    assert!(saved.status.success(), "{}", text(&saved));
    assert!(
        text(&saved).contains("no save command: r1, r2, r3"),
        "{}",
        text(&saved)
    );

    // A narrow terminal: the list's rows wrap, none is wider than the terminal.
    let narrow = xwirectl()
        .args(["lab", "list"])
        .env("COLUMNS", "24")
        .output()
        .unwrap();
    let listed = text(&narrow);
    assert!(listed.lines().all(|l| l.chars().count() <= 24), "{listed}");

    // Listed, checked, and an object that is not there is an error.
    let listed = run(&["lab", "list"]);
    let row: Vec<String> = (text(&listed).lines())
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .find(|fields| fields.first() == Some(&name))
        .unwrap_or_else(|| panic!("{name} not listed:\n{}", text(&listed)));
    assert_eq!(row[1..4], ["2", "3", "3"], "nodes, pods, wires: {row:?}");
    assert_eq!(row.last().map(String::as_str), Some("running"), "{row:?}");
    let listed = run(&["lab", "list", "--json"]);
    let labs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let ours = (labs.as_array().unwrap().iter())
        .find(|l| l["name"] == name.as_str())
        .unwrap();
    assert_eq!(
        (ours["nodes"].as_u64(), ours["state"].as_str()),
        (Some(2), Some("running"))
    );
    assert!(run(&["lab", "status", "--lab", &name, "--check"])
        .status
        .success());
    let mermaid = text(&run(&["lab", "graph", "--lab", &name]));
    assert!(
        mermaid.contains("p_r1 ---|\"1: eth2 - eth1 (remote, datagram)\"| p_r3"),
        "{mermaid}"
    );
    let dot = text(&run(&["lab", "graph", "--lab", &name, "--format", "dot"]));
    assert!(dot.contains("subgraph \"cluster_node-b\""), "{dot}");
    let socket = format!("/run/xwire/labs/{name}/nodes/node-a/api.sock");
    let missing = run(&["--socket", &socket, "topology", "get", "-n", &name, "r9"]);
    assert!(!missing.status.success());
    assert_eq!(
        text(&missing).trim(),
        format!("xwirectl: no Topology r9 in namespace {name}")
    );
    let present = run(&["--socket", &socket, "topology", "get", "-n", &name, "r1"]);
    assert!(present.status.success(), "{}", text(&present));

    // The logs: one node's daemon, or all of them and the supervisor's, prefixed.
    let node_log = text(&run(&["lab", "logs", "node-a", "--lab", &name]));
    assert!(node_log.contains("xwired ready"), "{node_log}");
    assert!(!node_log.contains("[node-a]"), "{node_log}");
    let last = run(&["lab", "logs", "node-a", "--lab", &name, "-n", "2"]);
    assert_eq!(
        String::from_utf8_lossy(&last.stdout).lines().count(),
        2,
        "{}",
        text(&last)
    );
    let all = text(&run(&["lab", "logs", "--lab", &name]));
    for prefix in ["[supervisor] ", "[node-a] ", "[node-b] "] {
        assert!(
            all.lines().any(|l| l.starts_with(prefix)),
            "{prefix} in {all}"
        );
    }
    let nobody = run(&["lab", "logs", "node-z", "--lab", &name]);
    assert!(!nobody.status.success());
    assert!(
        text(&nobody).contains("has no node node-z"),
        "{}",
        text(&nobody)
    );

    // Down by the lab's file.
    let out = run(&["lab", "down", "--lab", lab.file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("lab {name} is down")),
        "{}",
        text(&out)
    );
    assert_gone(&name);
    assert!(!text(&run(&["lab", "list"]))
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name.as_str())));
    let again = run(&["lab", "down", "--lab", &name]);
    assert!(!again.status.success());
    assert!(text(&again).contains("no lab named"), "{}", text(&again));
}

#[test]
fn lab_file_mistakes_are_refused_with_their_place_and_nothing_is_made() {
    let name = unique("tbad");
    let good = demo(&name);
    let cases = [
        (
            "[r1:eth2, r3:eth1]",
            "[r1:eth2, r9:eth1]",
            "line 10, column 26",
            "pod r9",
        ),
        (
            "[r2:eth2, r3:eth2]",
            "[r2:eth1, r3:eth2]",
            "line 13, column 17",
            "used by another link",
        ),
        (
            "    carrier: stream",
            "    carrier: stream\n    uid: 0\n  - endpoints: [r1:eth3, r2:eth3]\n    uid: 0",
            "line 18, column 10",
            "uid 0",
        ),
        (
            "    mtu: 9000",
            "    mtu: 9000\n    colour: red",
            "line 13, column 5",
            "colour",
        ),
    ];
    for (from, to, place, says) in cases {
        let lab = Lab::write(&name, &good.replacen(from, to, 1));
        // A user's mistake is one line, even where backtraces are asked for.
        let out = xwirectl()
            .env("RUST_BACKTRACE", "1")
            .args(["lab", "up", lab.file.to_str().unwrap()])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stderr).trim().lines().count(),
            1,
            "{}",
            text(&out)
        );
        assert!(!out.status.success(), "{to:?} was taken");
        let said = text(&out);
        assert!(
            said.contains(place) && said.contains(says),
            "{to:?}: {said}"
        );
        assert_gone(&name);
    }
}

#[test]
fn two_labs_with_the_same_node_and_pod_names_run_side_by_side() {
    let (one, two) = (unique("tone"), unique("ttwo"));
    let first = Lab::up(&one, &demo(&one));
    let second = Lab::up(&two, &demo(&two));
    for lab in [&first, &second] {
        assert!(lab.pings("r1", "10.0.13.2", 56), "lab {}", lab.name);
        assert!(lab.pings("r2", "10.0.23.2", 56), "lab {}", lab.name);
    }
    // Without --lab, a pod name both labs have is ambiguous.
    let out = run(&["lab", "exec", "r1", "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("several labs"), "{}", text(&out));

    let out = run(&["lab", "down", "--lab", &one]);
    assert!(out.status.success(), "{}", text(&out));
    assert_gone(&one);
    assert!(
        second.pings("r1", "10.0.13.2", 56),
        "the other lab stopped forwarding"
    );
    assert!(wires_up(&second.status()));
}

#[test]
fn a_killed_daemon_is_started_again_and_its_wires_come_back() {
    let name = unique("tsup");
    let lab = Lab::up(&name, &demo(&name));
    assert!(lab.pings("r1", "10.0.13.2", 56));
    let old = daemon_pid(&lab, "node-b").expect("node-b's daemon runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || {
            daemon_pid(&lab, "node-b").is_some_and(|pid| pid != old)
        }),
        "node-b's daemon was not started again"
    );
    assert!(
        lab.pings("r1", "10.0.13.2", 56),
        "the datagram wire did not come back"
    );
    assert!(
        lab.pings("r2", "10.0.23.2", 56),
        "the stream wire did not come back"
    );
    assert!(lab.pings("r1", "10.0.12.2", 56), "the local wire");
    let log = std::fs::read_to_string(format!("/run/xwire/labs/{name}/supervisor.log")).unwrap();
    assert!(log.contains("xwired on node node-b exited"), "{log}");
}

#[test]
fn down_clears_a_lab_whose_supervisor_and_daemon_were_killed() {
    let name = unique("tkill");
    let lab = Lab::up(&name, &demo(&name));
    let supervisor: i32 = std::fs::read_to_string(format!("/run/xwire/labs/{name}/supervisor.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let daemon = daemon_pid(&lab, "node-a").unwrap();
    // A process left running inside a pod holds its namespace too.
    let mut sleeper = xwirectl()
        .args(["lab", "exec", "--lab", &name, "r3", "--", "sleep", "300"])
        .spawn()
        .unwrap();
    for pid in [supervisor, daemon] {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let out = run(&["lab", "down", "--lab", &name]);
    assert!(out.status.success(), "{}", text(&out));
    assert_gone(&name);
    assert!(lab.pids().is_empty());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// `lab down` returns only when what the lab made is gone: the host ends of the
/// management veths outlived it by up to seconds (the kernel destroys a removed
/// namespace's interfaces later), and `lab up` right after failed with "File exists".
#[test]
fn a_lab_taken_down_comes_up_again_at_once_ten_times() {
    let name = unique("tagain");
    let lab = Lab::write(&name, &demo(&name));
    for round in 0..10 {
        let up = run(&["lab", "up", lab.file.to_str().unwrap()]);
        assert!(up.status.success(), "round {round}: up:\n{}", text(&up));
        let down = run(&["lab", "down", "--lab", &name]);
        assert!(
            down.status.success(),
            "round {round}: down:\n{}",
            text(&down)
        );
        assert_gone(&name);
    }
}

#[test]
fn a_lab_that_fails_half_way_removes_what_it_made() {
    let name = unique("tfail");
    let bin = TempDir::new("lab-bin");
    std::os::unix::fs::symlink(support::xwired(), bin.0.join("xwired")).unwrap();
    let plugin = bin.0.join("xwire");
    std::fs::write(
        &plugin,
        "#!/bin/sh\necho '{\"cniVersion\":\"1.1.0\",\"code\":999,\"msg\":\"refused by the test\"}'\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let lab = Lab::write(&name, &demo(&name));
    let out = xwirectl()
        .env("XWIRE_LAB_BIN_DIR", &bin.0)
        .args(["lab", "up", lab.file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = text(&out);
    assert!(said.contains("refused by the test"), "{said}");
    assert!(said.contains("everything it made is removed"), "{said}");
    assert_gone(&name);
}

#[test]
fn edit_adds_and_removes_links_and_pods_while_the_other_wires_carry_traffic() {
    let name = unique("tedit");
    let lab = Lab::up(&name, &demo(&name));
    assert!(lab.pings("r1", "10.0.13.2", 56));
    assert!(lab.pings("r1", "10.0.12.2", 56));
    let uid_before = lab.status()["wires"][1]["uid"].clone();

    // Steady traffic on a remote and a local wire that the edit leaves alone.
    let flows: Vec<_> = [("r1", "10.0.13.2"), ("r2", "10.0.12.1")]
        .iter()
        .map(|(pod, address)| {
            xwirectl()
                .args(["lab", "exec", "--lab", &name, pod, "--"])
                .args(["ping", "-q", "-c", "300", "-i", "0.01", "-W", "1", address])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));

    // The stream wire goes; a wire r1-r3 and a pod r4 with a wire to r2 come.
    let stream_link = "  - endpoints: [r2:eth2, r3:eth2]\n    ips: [10.0.23.1/30, 10.0.23.2/30]\n    carrier: stream\n";
    let edited = demo(&name)
        .replace(stream_link, "")
        .replace("pods:\n", "pods:\n  r4: {node: node-b}\n")
        + "  - endpoints: [r1:eth3, r3:eth3]\n    ips: [10.0.31.1/30, 10.0.31.2/30]\n"
        + "  - endpoints: [r4:eth1, r2:eth3]\n    ips: [10.0.42.1/30, 10.0.42.2/30]\n";
    std::fs::write(&lab.file, edited).unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("pods added [r4]"), "{}", text(&out));

    for flow in flows {
        let out = flow.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            said.contains(" 0% packet loss"),
            "traffic was lost during the edit:\n{said}"
        );
    }
    assert!(lab.pings("r1", "10.0.31.2", 56), "the added link");
    assert!(lab.pings("r4", "10.0.42.2", 56), "the added pod's link");
    assert!(
        !lab.exec("r2", &["ip", "link", "show", "eth2"])
            .status
            .success(),
        "r2:eth2 is left"
    );
    assert!(
        !lab.exec("r3", &["ip", "link", "show", "eth2"])
            .status
            .success(),
        "r3:eth2 is left"
    );
    let status = lab.status();
    assert!(wires_up(&status), "{status:#}");
    assert_eq!(status["wires"].as_array().unwrap().len(), 4);
    assert_eq!(
        status["wires"][1]["uid"], uid_before,
        "a link that stayed got a new uid"
    );

    // Removing the pod again takes its namespace away; nodes cannot change.
    let without_r4 = std::fs::read_to_string(&lab.file)
        .unwrap()
        .replace("  r4: {node: node-b}\n", "")
        .replace(
            "  - endpoints: [r4:eth1, r2:eth3]\n    ips: [10.0.42.1/30, 10.0.42.2/30]\n",
            "",
        );
    std::fs::write(&lab.file, &without_r4).unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!namespaces_of(&name).contains(&format!("xl.{name}.p.r4")));
    std::fs::write(
        &lab.file,
        without_r4.replace("[node-a, node-b]", "[node-a, node-b, node-c]"),
    )
    .unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("nodes cannot change"), "{}", text(&out));
    assert!(lab.pings("r1", "10.0.31.2", 56));
}

#[test]
fn edit_moves_links_between_carriers_and_each_wire_carries_on_its_new_one() {
    let name = unique("tcarr");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/carriers.yaml");
    let yaml = std::fs::read_to_string(file)
        .unwrap()
        .replace("name: carriers", &format!("name: {name}"));
    let lab = Lab::up(&name, &yaml);
    let carriers = |status: &Value| -> Vec<(String, Value)> {
        status["wires"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["carrier"].as_str().unwrap().to_owned(),
                    w["end_states"].clone(),
                )
            })
            .collect()
    };
    let ends = |state: &str| serde_json::json!([state, state]);
    let status = lab.status();
    assert!(wires_up(&status), "{status:#}");
    assert_eq!(
        carriers(&status),
        [
            ("datagram".to_owned(), ends("remote")),
            ("stream".to_owned(), ends("remote")),
            ("vxlan".to_owned(), ends("vxlan")),
        ]
    );
    let kind = |pod: &str, ifname: &str| {
        let out = lab.exec(pod, &["ip", "-details", "link", "show", ifname]);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).contains("vxlan id")
    };
    assert!(kind("r1", "eth3") && kind("r2", "eth3") && !kind("r1", "eth1"));
    for ip in ["10.0.1.2", "10.0.2.2", "10.0.3.2"] {
        assert!(lab.pings("r1", ip, 1400), "r1 -> {ip}");
    }

    // The datagram wire moves to VXLAN and the VXLAN one to a QUIC stream.
    let mut now = ["vxlan", "stream", "stream"].into_iter();
    let edited: String = yaml
        .lines()
        .map(|l| match l.split_once("carrier: ") {
            Some((indent, _)) => format!("{indent}carrier: {}\n", now.next().unwrap()),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&lab.file, &edited).unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let moved = eventually(Duration::from_secs(20), || {
        let status = lab.status();
        wires_up(&status)
            && carriers(&status)
                == [
                    ("vxlan".to_owned(), ends("vxlan")),
                    ("stream".to_owned(), ends("remote")),
                    ("stream".to_owned(), ends("remote")),
                ]
    });
    assert!(moved, "{:#}", lab.status());
    assert!(kind("r1", "eth1") && kind("r2", "eth1") && !kind("r1", "eth3"));
    for ip in ["10.0.1.2", "10.0.2.2", "10.0.3.2"] {
        assert!(lab.pings("r1", ip, 1400), "r1 -> {ip} after the edit");
    }
}

#[test]
fn bench_measures_every_wire_or_one_and_draws_the_chart() {
    support::pktgen_bin(); // the lab finds it next to xwirectl
    let name = unique("tbench");
    let lab = Lab::up(&name, &demo(&name));
    let charts = TempDir::new("lab-chart");
    let chart = charts.0.join("all.png");
    // The short trials decide here (no confirming trial): this test is about what the
    // bench measures and reports, every figure present, on a machine that other tests
    // keep busy; the search's own rules are tested in bench/src/lossfree.rs. The run
    // of one link below holds its rate for a confirming trial.
    let out = run(&[
        "lab",
        "bench",
        "--lab",
        &name,
        "--seconds",
        "0.3",
        "--confirm-seconds",
        "0",
        "--json",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    // What it is at, as it goes, on stderr; the JSON alone on stdout.
    let progress = String::from_utf8_lossy(&out.stderr);
    for uid in 0..3 {
        assert!(
            progress.contains(&format!("lab bench: wire {uid} (")),
            "{progress}"
        );
        assert!(
            progress.contains(&format!("lab bench: wire {uid}: done in")),
            "{progress}"
        );
    }
    assert!(
        progress.contains("lab bench: kernel VXLAN node-a -> node-b"),
        "{progress}"
    );
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 3);
    for r in results {
        // Each direction alone, then both at once, each with its loss-free rate, the
        // latency at it, and what full offered load gave.
        let directions: Vec<(&str, bool)> = r["directions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["direction"].as_str().unwrap(),
                    d["at_once"].as_bool().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            directions,
            [
                ("a->b", false),
                ("b->a", false),
                ("a->b", true),
                ("b->a", true)
            ],
            "{r}"
        );
        for d in r["directions"].as_array().unwrap() {
            // Not bounded by the full-rate figure: with both directions at full rate the
            // two generators share the CPUs and may offer less than in a paced trial.
            assert!(d["lossfree_pps"].as_f64().unwrap() > 0.0, "{d}");
            assert!(d["p99_us"].as_f64().unwrap() > 0.0, "{d}");
            assert!(d["peak_delivered_pps"].as_f64().unwrap() > 0.0, "{d}");
        }
        assert!(r["latency"]["delivered"].as_u64().unwrap() > 0, "{r}");
        assert!(r["latency"]["p50_us"].as_f64().unwrap() > 0.0, "{r}");
        // A remote wire is read against a kernel VXLAN between its two nodes, measured
        // the same way; a local wire has no baseline.
        if r["kind"] == "remote" {
            let baseline = &r["baseline"];
            assert_eq!(baseline["path"], "kernel-vxlan", "{r}");
            assert_eq!(
                baseline["nodes"],
                serde_json::json!(["node-a", "node-b"]),
                "{r}"
            );
            assert_eq!(baseline["frame_bytes"], r["frame_bytes"], "{r}");
            let directions = baseline["directions"].as_array().unwrap();
            assert_eq!(directions.len(), 4, "{r}");
            for d in directions {
                assert!(d["lossfree_pps"].as_f64().unwrap() > 0.0, "{d}");
            }
            assert!(
                baseline["latency"]["delivered"].as_u64().unwrap() > 0,
                "{r}"
            );
        } else {
            assert!(r.get("baseline").is_none(), "{r}");
        }
    }
    // The baseline's devices and pods are gone once the bench ends.
    let leftovers: Vec<String> = xwire_netns::named::names()
        .into_iter()
        .filter(|ns| ns.contains(&format!("{name}.vx.")))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // The jumbo wire is measured with the frame size asked for, within its MTU.
    assert_eq!(results[1]["frame_bytes"], 1514);
    assert_eq!(results[1]["directions"][0]["frame_bytes"], 1514);
    let png = std::fs::read(&chart).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");

    let bench_link = |link: &str, rest: &[&str]| {
        let mut args = vec!["lab", "bench", "--lab", &name, "--link", link];
        args.extend_from_slice(rest);
        run(&args)
    };
    let one = charts.0.join("one.png");
    let out = bench_link(
        "2",
        &[
            "--seconds",
            "0.3",
            "--confirm-seconds",
            "0.5",
            "--flows",
            "b-to-a",
            "--chart",
            one.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let table = text(&out);
    assert!(
        table.contains("r2:eth2 -> r3:eth2") && !table.contains("r1:eth1 -> r2:eth1"),
        "{table}"
    );
    assert!(
        table.contains("b->a alone") && !table.contains("a->b"),
        "{table}"
    );
    assert!(
        table.contains("KERNEL VXLAN, SAME NODES") && table.contains("node-a -> node-b"),
        "{table}"
    );
    assert!(one.exists());

    // A same-node wire that the switch steers (impaired, here by a loss too small to
    // matter): the pods' interfaces carry the switch's XDP program, and the bench's
    // generator and sink take AF_PACKET there. They refused to start before.
    let out = run(&["lab", "impair", "0", "--lab", &name, "--loss", "0.0001"]);
    assert!(out.status.success(), "{}", text(&out));
    let steered = |status: &Value| {
        status["wires"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["uid"] == 0 && w["carrier"] == "switch")
    };
    assert!(
        eventually(Duration::from_secs(10), || steered(&lab.status())),
        "{:#}",
        lab.status()
    );
    let steered_chart = charts.0.join("steered.png");
    let out = bench_link(
        "0",
        &[
            "--seconds",
            "0.3",
            "--confirm-seconds",
            "0",
            "--flows",
            "a-to-b",
            "--json",
            "--chart",
            steered_chart.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let direction = &results[0]["directions"][0];
    assert_eq!(direction["direction"], "a->b", "{results}");
    assert!(
        direction["lossfree_pps"].as_f64().unwrap() > 0.0,
        "{results}"
    );
    assert!(steered(&lab.status()), "{:#}", lab.status());

    let out = bench_link("99", &[]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no link with uid 99"), "{}", text(&out));
    drop(lab);
}

#[test]
fn every_example_lab_comes_up_and_forwards_on_every_wire() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        // Labs of containers need their image built: tests/containers.rs runs those.
        .filter(|p| !std::fs::read_to_string(p).unwrap().contains("image:"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for (i, file) in files.iter().enumerate() {
        let yaml = std::fs::read_to_string(file).unwrap();
        // The example's own name, made unique so a lab a person has up is not touched.
        let name = unique(&format!("tex{i}x"));
        let yaml: String = yaml
            .lines()
            .map(|l| {
                if l.starts_with("name:") {
                    format!("name: {name}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let lab = Lab::up(&name, &yaml);
        let status = lab.status();
        assert!(wires_up(&status), "{}: {status:#}", file.display());
        for wire in status["wires"].as_array().unwrap() {
            let pod = wire["endpoints"][0]
                .as_str()
                .unwrap()
                .split(':')
                .next()
                .unwrap();
            if let Some(ip) = wire["ips"][1].as_str() {
                let ip = ip.split('/').next().unwrap();
                assert!(lab.pings(pod, ip, 56), "{}: {pod} -> {ip}", file.display());
            }
        }
    }
}

#[test]
fn an_interrupted_up_removes_what_it_made() {
    use std::os::unix::process::CommandExt;
    let name = unique("tint");
    let bin = TempDir::new("lab-bin-slow");
    std::os::unix::fs::symlink(support::xwired(), bin.0.join("xwired")).unwrap();
    // A plugin that hangs, as one waiting on a stuck runtime would.
    let plugin = bin.0.join("xwire");
    std::fs::write(&plugin, "#!/bin/sh\nsleep 60\n").unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let lab = Lab::write(&name, &demo(&name));
    // Its own process group, as a shell gives a foreground job: Ctrl-C goes to the group.
    let child = xwirectl()
        .env("XWIRE_LAB_BIN_DIR", &bin.0)
        .args(["lab", "up", lab.file.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let supervisor = format!("/run/xwire/labs/{name}/supervisor.pid");
    assert!(
        eventually(Duration::from_secs(20), || Path::new(&supervisor).exists()),
        "lab up did not get as far as its daemons"
    );
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    // Why, not the hung step's failure; and what was cleaned up.
    let said = text(&out);
    assert!(said.contains("did not come up: interrupted"), "{said}");
    assert!(!said.contains("CNI ADD failed"), "{said}");
    assert!(
        said.contains(" stopped, ") && said.contains("namespaces removed"),
        "{said}"
    );
    assert_gone(&name);
}

#[test]
fn lab_commands_refuse_names_that_leave_the_labs_directory_and_down_kills_only_the_labs() {
    // A scratch directory named by its absolute path, and names that climb out.
    let scratch = TempDir::new("scratch");
    std::fs::write(scratch.0.join("keep"), "data").unwrap();
    let outside = scratch.0.to_str().unwrap();
    for args in [
        vec!["lab", "down", "--lab", outside],
        vec!["lab", "down", "--lab", ".."],
        vec!["lab", "status", "--lab", "../../tmp"],
        vec!["lab", "bench", "--lab", outside],
        vec!["lab", "supervise", outside],
        vec!["lab", "exec", "--lab", outside, "r1", "--", "true"],
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(text(&out).contains("lab name"), "{args:?}: {}", text(&out));
    }
    assert_eq!(
        std::fs::read_to_string(scratch.0.join("keep")).unwrap(),
        "data"
    );

    // A directory under the labs' directory that no lab made is not removed.
    let stray = unique("tstray");
    let stray_dir = Path::new("/run/xwire/labs").join(&stray);
    std::fs::create_dir_all(&stray_dir).unwrap();
    std::fs::write(stray_dir.join("keep"), "data").unwrap();
    let out = run(&["lab", "down", "--lab", &stray]);
    let kept = stray_dir.join("keep").exists();
    let _ = std::fs::remove_dir_all(&stray_dir);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("not made by"), "{}", text(&out));
    assert!(kept);

    // A process that only names the lab's directory is not the lab's.
    let name = unique("tbystand");
    let lab = Lab::up(
        &name,
        &format!(
            "name: {name}\nnodes: [node-a]\npods:\n  r1: {{node: node-a}}\n  r2: {{node: node-a}}\nlinks:\n  - endpoints: [r1:eth1, r2:eth1]\n"
        ),
    );
    let mut tail = Command::new("tail")
        .arg("-f")
        .arg(format!("/run/xwire/labs/{name}/supervisor.log"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = run(&["lab", "down", "--lab", &name]);
    let tail_alive = tail.try_wait().unwrap().is_none();
    let _ = tail.kill();
    let _ = tail.wait();
    assert!(out.status.success(), "{}", text(&out));
    assert!(tail_alive, "lab down killed a tail of the lab's log");
    assert_gone(&name);
    drop(lab);
}

/// A ring of `pods` pods on one node, an address pair on every link.
fn ring_on_one_node(name: &str, pods: usize) -> String {
    use std::fmt::Write;
    let mut yaml = format!("name: {name}\nnodes: [node-a]\npods:\n");
    for i in 0..pods {
        let _ = writeln!(yaml, "  p{i}: {{node: node-a}}");
    }
    yaml.push_str("links:\n");
    for i in 0..pods {
        let n = i * 4;
        let prefix = format!("10.{}.{}", 100 + (n >> 16), (n >> 8) & 255);
        let last = n & 255;
        let _ = writeln!(
            yaml,
            "  - endpoints: [p{i}:eth1, p{}:eth2]\n    ips: [{prefix}.{}/30, {prefix}.{}/30]",
            (i + 1) % pods,
            last + 1,
            last + 2
        );
    }
    yaml
}

/// 1,100 pods on one node: the node's Topology list (about 1.1 MB) is over the 1 MiB a
/// local API message may carry, so `lab up` sends it in pieces; and the node's management
/// network needs a second bridge, a bridge taking at most 1,024 ports.
#[test]
fn a_lab_over_one_messages_cap_and_a_bridges_ports_comes_up_whole() {
    let name = unique("tbig");
    let lab = Lab::up(&name, &ring_on_one_node(&name, 1100));
    let status = lab.status();
    assert!(wires_up(&status));
    assert_eq!(status["wires"].as_array().unwrap().len(), 1100);
    // The pod with the highest management number hangs off the second bridge: the host
    // reaches it over the management network, and it reaches its neighbour over its wire.
    let (number, pod, address) = status["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let address = p["mgmt"]["ipv4"].as_str().unwrap().to_owned();
            let ip: std::net::Ipv4Addr = address.parse().unwrap();
            let number = u32::from(ip) & 0xfff;
            (number, p["name"].as_str().unwrap().to_owned(), address)
        })
        .max()
        .unwrap();
    assert!(
        number >= 1002,
        "{pod} has number {number}: still on the first bridge"
    );
    let host_reaches = Command::new("ping")
        .args(["-c", "1", "-W", "2", &address])
        .status()
        .unwrap();
    assert!(
        host_reaches.success(),
        "the host does not reach {pod} at {address}"
    );
    let i: usize = pod[1..].parse().unwrap();
    let n = i * 4;
    let peer = format!(
        "10.{}.{}.{}",
        100 + (n >> 16),
        (n >> 8) & 255,
        (n & 255) + 2
    );
    assert!(lab.pings(&pod, &peer, 56), "{pod} -> {peer}");
}
