//! Impairments and capture in a running lab, through the real CLI, daemons and
//! namespaces: a delay in the lab file and one set at runtime show in ping's round trip
//! (a same-node wire moves onto the switch path and back), and a capture of a ping
//! across a remote wire is read back by tshark with each direction on its interface.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::eventually;
use support::lab::{daemon_pid, run, text, unique, xwirectl, Lab};

/// The demo's shape with the same-node wire (uid 0) delayed 20 ms each way.
fn impaired_lab(name: &str) -> String {
    format!(
        "name: {name}
nodes: [node-a, node-b]
pods:
  r1: {{node: node-a}}
  r2: {{node: node-a}}
  r3: {{node: node-b}}
links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: [10.0.12.1/30, 10.0.12.2/30]
    impair: {{delay: 20ms}}
  - endpoints: [r1:eth2, r3:eth1]
    ips: [10.0.13.1/30, 10.0.13.2/30]
"
    )
}

/// The round trips of `count` pings from `pod`, in milliseconds.
fn rtts(lab: &Lab, pod: &str, address: &str, count: u32) -> Vec<f64> {
    let count = count.to_string();
    let out = lab.exec(
        pod,
        &["ping", "-c", &count, "-i", "0.1", "-W", "2", address],
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("time=")?.1.split(' ').next()?.parse().ok())
        .collect()
}

fn wire(status: &serde_json::Value, uid: u64) -> &serde_json::Value {
    status["wires"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["uid"] == uid)
        .unwrap()
}

#[test]
fn a_delay_from_the_lab_file_or_set_at_runtime_shows_in_pings_round_trip() {
    let name = unique("timp");
    let lab = Lab::up(&name, &impaired_lab(&name));
    let status = lab.status();
    assert_eq!(wire(&status, 0)["carrier"], "switch", "{status:#}");
    assert_eq!(wire(&status, 0)["state"], "up", "{status:#}");
    assert_eq!(wire(&status, 0)["impairments"][0], "delay 20ms");
    assert!(lab.pings("r1", "10.0.12.2", 56));
    let delayed = rtts(&lab, "r1", "10.0.12.2", 5);
    assert_eq!(delayed.len(), 5, "{delayed:?}");
    assert!(delayed.iter().all(|&ms| ms >= 40.0), "{delayed:?}");
    let table = text(&run(&["lab", "status", "--lab", &name]));
    assert!(table.contains("A->B  delay 20ms"), "{table}");

    // A daemon killed leaves a plain pair; the one started again steers it again.
    let old = daemon_pid(&lab, "node-a").expect("node-a's daemon runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        daemon_pid(&lab, "node-a").is_some_and(|pid| pid != old)
    }));
    assert!(eventually(Duration::from_secs(10), || {
        rtts(&lab, "r1", "10.0.12.2", 2)
            .iter()
            .all(|&ms| ms >= 40.0)
    }));
    assert_eq!(wire(&lab.status(), 0)["carrier"], "switch");

    // Cleared: the wire is a straight veth again, and still forwards.
    let out = run(&["lab", "impair", "0", "--lab", &name, "--clear"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("not impaired"), "{}", text(&out));
    assert!(eventually(Duration::from_secs(10), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "veth"));
    assert!(lab.pings("r1", "10.0.12.2", 56));
    let cleared = rtts(&lab, "r1", "10.0.12.2", 3);
    assert!(cleared.iter().all(|&ms| ms < 20.0), "{cleared:?}");

    // One direction of the remote wire, named by an endpoint, at runtime.
    assert!(lab.pings("r1", "10.0.13.2", 56));
    let out = run(&[
        "lab",
        "impair",
        "r3:eth1",
        "--lab",
        &name,
        "--direction",
        "b-to-a",
        "--delay",
        "30ms",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let one_way = rtts(&lab, "r1", "10.0.13.2", 5);
    assert_eq!(one_way.len(), 5, "{one_way:?}");
    assert!(
        one_way.iter().all(|&ms| (30.0..60.0).contains(&ms)),
        "{one_way:?}"
    );

    // A setting out of range is refused with its name, and nothing changes.
    let out = run(&["lab", "impair", "1", "--lab", &name, "--loss", "150"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("loss"), "{}", text(&out));
    assert!(!text(&out).contains("stack backtrace"), "{}", text(&out));
    assert_eq!(
        wire(&lab.status(), 1)["impairments"],
        serde_json::json!([null, "delay 30ms"])
    );

    // Loss in bursts, at runtime as in the lab file, laid over the delay.
    let out = run(&[
        "lab",
        "impair",
        "1",
        "--lab",
        &name,
        "--direction",
        "b-to-a",
        "--loss-burst",
        "1,25",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        wire(&lab.status(), 1)["impairments"][1],
        "delay 30ms, loss bursts (p 1%, r 25%, 0%/100%)"
    );
    let out = run(&["lab", "impair", "1", "--lab", &name, "--loss-burst", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn impairing_and_clearing_a_same_node_wire_loses_no_ping() {
    let name = unique("tmove");
    let lab = Lab::up(&name, &support::lab::demo(&name));
    assert!(lab.pings("r1", "10.0.12.2", 56));
    // 200 pings a second for 4 s, while the wire moves onto the switch path and back
    // twice (once for a delay, once for a capture).
    let pinging = xwirectl()
        .args(["lab", "exec", "--lab", &name, "r1", "--"])
        .args([
            "ping",
            "-q",
            "-c",
            "800",
            "-i",
            "0.005",
            "-W",
            "2",
            "10.0.12.2",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let impair = |args: &[&str]| {
        let mut all = vec!["lab", "impair", "0", "--lab", &name];
        all.extend_from_slice(args);
        let out = run(&all);
        assert!(out.status.success(), "{}", text(&out));
    };
    impair(&["--delay", "2ms"]);
    assert_eq!(wire(&lab.status(), 0)["carrier"], "switch");
    std::thread::sleep(Duration::from_millis(700));
    impair(&["--clear"]);
    assert_eq!(wire(&lab.status(), 0)["carrier"], "veth");
    std::thread::sleep(Duration::from_millis(500));
    let capture = xwirectl()
        .args(["lab", "capture", "0", "--lab", &name, "-w", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "switch"));
    std::thread::sleep(Duration::from_millis(700));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(capture.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let captured = capture.wait_with_output().unwrap();
    assert!(
        captured.stdout.len() > 1000,
        "{}",
        String::from_utf8_lossy(&captured.stderr)
    );
    assert!(eventually(Duration::from_secs(5), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "veth"));
    let out = pinging.wait_with_output().unwrap();
    let summary = text(&out);
    assert!(
        summary.contains("800 packets transmitted, 800 received"),
        "{summary}"
    );
}

#[test]
fn an_impaired_jumbo_wire_is_remade_through_the_node_and_carries_jumbo_frames() {
    let name = unique("tjumbo");
    let yaml = format!(
        "name: {name}
nodes: [node-a]
pods:
  r1: {{node: node-a}}
  r2: {{node: node-a}}
links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: [10.0.12.1/30, 10.0.12.2/30]
    mtu: 9000
    impair: {{delay: 10ms}}
"
    );
    let lab = Lab::up(&name, &yaml);
    let status = lab.status();
    // Too large to steer in place: each pod's end is a veth to the node.
    assert_eq!(wire(&status, 0)["end_states"][0], "switched", "{status:#}");
    assert_eq!(wire(&status, 0)["carrier"], "switch", "{status:#}");
    assert!(lab.pings("r1", "10.0.12.2", 8000));
    let delayed = rtts(&lab, "r1", "10.0.12.2", 3);
    assert!(delayed.iter().all(|&ms| ms >= 20.0), "{delayed:?}");
    let out = run(&["lab", "impair", "0", "--lab", &name, "--clear"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(eventually(Duration::from_secs(10), || wire(
        &lab.status(),
        0
    )["end_states"][0]
        == "veth"));
    assert!(lab.pings("r1", "10.0.12.2", 8000));
}

/// tshark's view of a capture file: each ICMP frame's interface, type and sequence.
fn icmp_in(file: &std::path::Path) -> Vec<(String, u8, u16)> {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-Y", "icmp", "-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "frame.interface_name",
            "-e",
            "icmp.type",
            "-e",
            "icmp.seq",
        ])
        .output()
        .expect("run tshark (Debian's tshark package)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            (
                fields[0].to_owned(),
                fields[1].parse().unwrap(),
                fields[2].parse().unwrap(),
            )
        })
        .collect()
}

/// `lab capture LINK -w FILE` of lab `name`, once the file has its first bytes (within
/// `limit`).
fn start_capture(name: &str, link: &str, file: &std::path::Path, limit: Duration) -> Child {
    let capture = xwirectl()
        .args(["lab", "capture", link, "--lab", name, "-w"])
        .arg(file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(limit, || std::fs::metadata(file).is_ok_and(|m| m.len() > 0)));
    capture
}

/// Ends a capture as Ctrl-C does; it must exit cleanly.
fn end_capture(mut capture: Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(capture.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let ended = capture.wait().unwrap();
    assert!(ended.success(), "{ended:?}");
}

#[test]
fn a_capture_of_a_ping_across_a_remote_wire_shows_both_directions_in_order() {
    let name = unique("tcap");
    let lab = Lab::up(&name, &impaired_lab(&name));
    assert!(lab.pings("r1", "10.0.13.2", 56));
    let file = lab.file.with_file_name("remote.pcapng");
    let capture = start_capture(&name, "1", &file, Duration::from_secs(10));
    let replies = rtts(&lab, "r1", "10.0.13.2", 3);
    assert_eq!(replies.len(), 3);
    // Ctrl-C ends it with a whole file.
    end_capture(capture);
    let expected: Vec<(String, u8, u16)> = (1..=3)
        .flat_map(|seq| {
            [
                ("r1:eth2".to_owned(), 8, seq),
                ("r3:eth1".to_owned(), 0, seq),
            ]
        })
        .collect();
    assert_eq!(icmp_in(&file), expected);

    // With no -w: a file named after the lab and the link, in the current directory.
    let here = lab.file.parent().unwrap();
    let out = xwirectl()
        .args(["lab", "capture", "1", "--lab", &name, "--seconds", "0.5"])
        .current_dir(here)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let default = here.join(format!("{name}-link1.pcapng"));
    let head = std::fs::read(&default).unwrap_or_else(|e| panic!("{}: {e}", default.display()));
    assert_eq!(
        head.get(..4),
        Some(&[0x0a, 0x0d, 0x0d, 0x0a][..]),
        "a pcapng file"
    );

    // The far end's node, through the node command a cluster's operator uses: the
    // interface names are the same, seen from r3.
    let socket = format!("/run/xwire/labs/{name}/nodes/node-b/api.sock");
    let far = lab.file.with_file_name("far.pcapng");
    let mut capture = xwirectl()
        .args([
            "--socket",
            &socket,
            "capture",
            "-n",
            &name,
            "r3",
            "eth1",
            "--seconds",
            "3",
            "-w",
        ])
        .arg(&far)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || std::fs::metadata(
        &far
    )
    .is_ok_and(|m| m.len() > 0)));
    assert_eq!(rtts(&lab, "r1", "10.0.13.2", 2).len(), 2);
    assert!(capture.wait().unwrap().success());
    let expected: Vec<(String, u8, u16)> = (1..=2)
        .flat_map(|seq| {
            [
                ("r1:eth2".to_owned(), 8, seq),
                ("r3:eth1".to_owned(), 0, seq),
            ]
        })
        .collect();
    assert_eq!(icmp_in(&far), expected);

    // Streamed to tshark while the lab runs, on the same-node wire once its delay is
    // cleared: it moves onto the switch path while it is captured, and back after.
    let out = run(&["lab", "impair", "0", "--lab", &name, "--clear"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(eventually(Duration::from_secs(10), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "veth"));
    let mut capture = xwirectl()
        .args([
            "lab",
            "capture",
            "r2:eth1",
            "--lab",
            &name,
            "--seconds",
            "5",
            "-w",
            "-",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let tshark = Command::new("tshark")
        .args(["-r", "-", "-Y", "icmp", "-T", "fields"])
        .args(["-e", "frame.interface_name", "-e", "icmp.type"])
        .stdin(capture.stdout.take().unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(4), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "switch"));
    assert!(lab.pings("r1", "10.0.12.2", 56));
    assert!(capture.wait().unwrap().success());
    let seen = tshark.wait_with_output().unwrap();
    let seen = String::from_utf8_lossy(&seen.stdout).to_string();
    assert!(
        seen.contains("r1:eth1\t8") && seen.contains("r2:eth1\t0"),
        "{seen}"
    );
    assert!(eventually(Duration::from_secs(10), || wire(
        &lab.status(),
        0
    )["carrier"]
        == "veth"));
    assert!(lab.pings("r1", "10.0.12.2", 56));
}

/// The pod interface's kind: `vxlan` on a VXLAN wire in place, `veth` while bridged.
fn vxlan_in_pod(lab: &Lab, pod: &str, ifname: &str) -> bool {
    let out = lab.exec(pod, &["ip", "-details", "link", "show", ifname]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).contains("vxlan id")
}

#[test]
fn a_vxlan_wire_is_bridged_through_the_switch_while_impaired_or_captured() {
    let name = unique("tvxb");
    let yaml = format!(
        "name: {name}
nodes: [node-a, node-b]
pods:
  r1: {{node: node-a}}
  r2: {{node: node-b}}
links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: [10.0.3.1/30, 10.0.3.2/30]
    carrier: vxlan
"
    );
    let lab = Lab::up(&name, &yaml);
    assert!(lab.pings("r1", "10.0.3.2", 1400));
    assert!(vxlan_in_pod(&lab, "r1", "eth1") && vxlan_in_pod(&lab, "r2", "eth1"));

    // Delayed one way (what r1 sends): r1's end is bridged, r2's stays a VXLAN device.
    let out = run(&[
        "lab",
        "impair",
        "0",
        "--lab",
        &name,
        "--direction",
        "a-to-b",
        "--delay",
        "20ms",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(eventually(Duration::from_secs(15), || !vxlan_in_pod(
        &lab, "r1", "eth1"
    )));
    assert!(vxlan_in_pod(&lab, "r2", "eth1"));
    assert!(lab.pings("r1", "10.0.3.2", 1400));
    let delayed = rtts(&lab, "r1", "10.0.3.2", 5);
    assert_eq!(delayed.len(), 5, "{delayed:?}");
    assert!(
        delayed.iter().all(|&ms| (20.0..40.0).contains(&ms)),
        "{delayed:?}"
    );
    let status = lab.status();
    assert_eq!(wire(&status, 0)["carrier"], "vxlan", "{status:#}");
    assert_eq!(wire(&status, 0)["state"], "up", "{status:#}");

    // A daemon killed: the one started again opens the bridge's ports again.
    let old = daemon_pid(&lab, "node-a").expect("node-a's daemon runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(old),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        daemon_pid(&lab, "node-a").is_some_and(|pid| pid != old)
    }));
    assert!(eventually(Duration::from_secs(10), || {
        let again = rtts(&lab, "r1", "10.0.3.2", 2);
        again.len() == 2 && again.iter().all(|&ms| ms >= 20.0)
    }));

    // Cleared: a VXLAN device in the pod again.
    let out = run(&["lab", "impair", "0", "--lab", &name, "--clear"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(eventually(Duration::from_secs(15), || vxlan_in_pod(
        &lab, "r1", "eth1"
    )));
    assert!(lab.pings("r1", "10.0.3.2", 1400));
    let cleared = rtts(&lab, "r1", "10.0.3.2", 3);
    assert!(cleared.iter().all(|&ms| ms < 20.0), "{cleared:?}");

    // Captured (at r1's end, whose node's switch sees both directions): that end is
    // bridged while the capture runs; each direction is named by the end it left.
    let file = lab.file.with_file_name("vxlan.pcapng");
    let capture = start_capture(&name, "0", &file, Duration::from_secs(15));
    assert!(!vxlan_in_pod(&lab, "r1", "eth1") && vxlan_in_pod(&lab, "r2", "eth1"));
    assert!(lab.pings("r1", "10.0.3.2", 56));
    let replies = rtts(&lab, "r1", "10.0.3.2", 3);
    assert_eq!(replies.len(), 3);
    end_capture(capture);
    let seen = icmp_in(&file);
    for seq in 1..=3u16 {
        assert!(seen.contains(&("r1:eth1".to_owned(), 8, seq)), "{seen:?}");
        assert!(seen.contains(&("r2:eth1".to_owned(), 0, seq)), "{seen:?}");
    }
    // The capture over, r1's end is a VXLAN device in its pod again, and the bridge's
    // node devices (the veth's node end, the node's own VXLAN device) are gone.
    assert!(eventually(Duration::from_secs(15), || vxlan_in_pod(
        &lab, "r1", "eth1"
    )));
    assert!(lab.pings("r1", "10.0.3.2", 1400));
    let node = format!("xl.{name}.n.node-a");
    let out = Command::new("ip")
        .args(["-n", &node, "-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && links.contains("underlay0"),
        "{links}"
    );
    assert!(
        !links.contains(": xv") && !links.contains(": xw"),
        "left on node-a:\n{links}"
    );
}
