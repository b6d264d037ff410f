//! Reconciliation when something fails that is not "the pod is gone": a pod namespace
//! that cannot be opened for want of file descriptors, and one pod whose reconciliation
//! fails among others that need repair. Neither may cost a live pod its wires.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{call, eventually, pair_topology, start_node, Pod};
use xwire_proto::local::{Request, Response};

const LINK: &[(u64, &str, &str, &str, &str)] = &[(0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30")];

fn set_file_limit(pid: u32, soft: u64, hard: u64) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:{hard}"))
        .status()
        .expect("run prlimit (util-linux)");
    assert!(status.success());
}

fn file_limit(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// The lowest file descriptor number the process does not use: with the open-file
/// limit set to it, its next open fails with EMFILE.
fn lowest_free_fd(pid: u32) -> u64 {
    let used: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|fd| !used.contains(fd)).unwrap()
}

#[test]
fn a_pod_namespace_that_cannot_be_opened_leaves_the_pod_and_its_wires() {
    let mut node = start_node("n1", "reconcile_interval_secs = 1");
    node.apply(&pair_topology("r1", "r2", LINK));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    assert_eq!(call(&r2, "ADD", &config).code, 0);
    assert_eq!(node.wire_state("r1", 0).as_deref(), Some("veth"));

    let pid = node.daemon_pid().unwrap();
    let (soft, hard) = file_limit(pid);
    // The daemon raised its limit at start to what its ports need.
    assert!(soft >= 4096 * 4 + 1024, "soft limit {soft}");
    // No descriptor to spare: every pass of the timer now fails to open the pods'
    // namespaces with EMFILE.
    set_file_limit(pid, lowest_free_fd(pid), hard);
    std::thread::sleep(Duration::from_millis(2500));
    set_file_limit(pid, soft, hard);

    let state = node.state();
    assert_eq!(state.attachments.len(), 2, "{}", node.log());
    assert_eq!(node.wire_state("r1", 0).as_deref(), Some("veth"));
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("veth"));
    assert!(r1.has("eth1") && r2.has("eth1"));
    assert!(
        node.log().contains("cannot be opened now"),
        "the failure was not reported:\n{}",
        node.log()
    );
    // And the next pass, with descriptors again, finds nothing to change.
    assert!(eventually(Duration::from_secs(5), || matches!(
        node.ask(&Request::Reconcile),
        Ok(Response::Reconciled { changes, failures }) if changes.is_empty() && failures.is_empty()
    )));
}

#[test]
fn a_pod_that_fails_to_reconcile_is_kept_and_does_not_stop_the_others() {
    let mut node = start_node("n1", "");
    node.apply(&pair_topology("a1", "a2", LINK));
    node.apply(&pair_topology("b1", "b2", LINK).replace("uid: 0", "uid: 1"));
    let pods: Vec<Pod> = ["a1", "a2", "b1", "b2"].into_iter().map(Pod::new).collect();
    let config = node.net_config("1.1.0");
    for pod in &pods {
        assert_eq!(call(pod, "ADD", &config).code, 0);
    }
    node.stop();
    // While the daemon is down: a1's namespace path comes to answer with ELOOP (the
    // namespace itself lives on, held by the test), and b's wire loses its veth.
    let a1_path = pods[0].ns.path().to_owned();
    nix::mount::umount2(&a1_path, nix::mount::MntFlags::MNT_DETACH).unwrap();
    std::fs::remove_file(&a1_path).unwrap();
    std::os::unix::fs::symlink(a1_path.file_name().unwrap(), &a1_path).unwrap();
    pods[2]
        .ns
        .exec(Command::new("ip").args(["link", "del", "eth1"]))
        .unwrap();
    assert!(!pods[3].has("eth1"));

    node.restart();
    assert!(
        eventually(Duration::from_secs(5), || pods[2].has("eth1")
            && pods[3].has("eth1")),
        "b's wire was not repaired:\n{}",
        node.log()
    );
    let Ok(Response::Reconciled { failures, .. }) = node.ask(&Request::Reconcile) else {
        panic!()
    };
    assert!(
        failures.iter().any(|f| f.contains("a1")),
        "a1's failure is not reported: {failures:?}"
    );
    // a1 keeps its attachment and its wire, and a2's end stays joined to it.
    assert_eq!(node.state().attachments.len(), 4);
    assert_eq!(node.wire_state("a1", 0).as_deref(), Some("veth"));
    assert_eq!(node.wire_state("a2", 0).as_deref(), Some("veth"));
    assert!(pods[0].has("eth1") && pods[1].has("eth1"));
}
