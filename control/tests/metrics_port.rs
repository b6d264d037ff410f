//! The metrics port against an unprivileged local user (issue 37, item 3): slow clients,
//! and a daemon out of file descriptors. What the daemon keeps: a bounded number of
//! descriptors, CNI calls answered within a second, a log that does not grow with the
//! attack, and scrapes that work again once it ends.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use support::*;
use xwire_control::metrics_server::{HEAD_TIMEOUT, MAX_CONNECTIONS};

const METRICS: &str = "127.0.0.1:9470";
/// Descriptors the daemon may open during a test besides the metrics connections (a
/// CNI call's connection, a netlink socket, a namespace opened for a moment).
const OTHER_FILES: usize = 16;
/// A request head that never ends.
const PARTIAL_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n";

fn metrics_node(label: &str) -> Node {
    start_node(label, &format!("metrics_address = \"{METRICS}\""))
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|entries| entries.count())
        .unwrap_or(0)
}

/// The lines of the daemon's log that name a failed accept on the metrics socket.
fn accept_lines(node: &Node) -> usize {
    node.log()
        .lines()
        .filter(|l| l.contains("accept on the metrics socket"))
        .count()
}

/// One scrape in the node's namespace, as Prometheus would make it.
fn scrape(node: &Node) -> Result<String, String> {
    node.ns
        .run(|| {
            let address: SocketAddr = METRICS.parse().unwrap();
            let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2))
                .map_err(|e| format!("connect: {e}"))?;
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            stream
                .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .map_err(|e| format!("write: {e}"))?;
            let mut answer = String::new();
            stream
                .read_to_string(&mut answer)
                .map_err(|e| format!("read: {e}"))?;
            Ok(answer)
        })
        .unwrap()
}

/// A scrape that succeeds within `within`, trying again every 100 ms until then.
fn scrape_within(node: &Node, within: Duration) -> Result<String, String> {
    let deadline = Instant::now() + within;
    loop {
        match scrape(node) {
            Ok(answer) if answer.starts_with("HTTP/1.1 200") => return Ok(answer),
            Ok(answer) if Instant::now() >= deadline => return Err(answer),
            Err(e) if Instant::now() >= deadline => return Err(e),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Connections made at once, without waiting for their handshakes (those beyond the
/// listener's queue wait in SYN_SENT, as an attacker's would).
fn connect_many(node: &Node, count: usize) -> Vec<Socket> {
    node.ns
        .run(|| {
            let address: SocketAddr = METRICS.parse().unwrap();
            (0..count)
                .map(|_| {
                    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
                    socket.set_nonblocking(true).unwrap();
                    // EINPROGRESS: the handshake goes on without us.
                    let _ = socket.connect(&address.into());
                    socket
                })
                .collect()
        })
        .unwrap()
}

/// A CNI STATUS call through the plugin, and how long it took.
fn timed_status(node: &Node) -> (Outcome, Duration) {
    let started = Instant::now();
    let outcome = plugin("STATUS", &[], &node.net_config("1.1.0"));
    (outcome, started.elapsed())
}

#[test]
fn slow_clients_on_the_metrics_port_hold_a_bounded_share_of_the_daemon() {
    let mut node = metrics_node("mslow");
    let pid = node.daemon_pid().unwrap();
    scrape_within(&node, Duration::from_secs(2)).expect("a scrape before the attack");
    let files_before = open_files(pid);
    let log_lines_before = node.log().lines().count();

    let clients = connect_many(&node, 400);
    std::thread::sleep(Duration::from_millis(300));
    for client in &clients {
        let _ = (&*client).write(PARTIAL_HEAD);
    }
    // Until the first slow clients' heads time out, every slot is held by them.
    let attack_started = Instant::now();
    let mut most_files = 0;
    while attack_started.elapsed() < HEAD_TIMEOUT - Duration::from_secs(1) {
        most_files = most_files.max(open_files(pid));
        let (status, took) = timed_status(&node);
        assert_eq!(
            status.code, 0,
            "STATUS during the attack: {}",
            status.output
        );
        assert!(
            took < Duration::from_secs(1),
            "STATUS took {took:?} during the attack"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        most_files <= files_before + MAX_CONNECTIONS + OTHER_FILES,
        "400 slow clients took the daemon from {files_before} to {most_files} open files"
    );

    drop(clients);
    let answer = scrape_within(&node, Duration::from_secs(2))
        .expect("a scrape within 2 s of the attack's end");
    assert!(answer.contains("xwire_"), "{answer}");
    let log_growth = node.log().lines().count() - log_lines_before;
    assert!(
        log_growth < 20,
        "the attack wrote {log_growth} log lines:\n{}",
        node.log()
    );
}

/// Sets the process's soft limit of open files; returns the limits it had.
fn set_open_file_limit(pid: u32, soft: u64) -> nix::libc::rlimit {
    let mut old = nix::libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads `old` for the current limits and writes none first (a null
    // new limit); both pointers are to live locals of the right type.
    let read = unsafe {
        nix::libc::prlimit(
            pid as nix::libc::pid_t,
            nix::libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(read, 0, "{}", std::io::Error::last_os_error());
    let new = nix::libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    restore_open_file_limit(pid, new);
    old
}

fn restore_open_file_limit(pid: u32, limit: nix::libc::rlimit) {
    // SAFETY: `limit` is a live local of the type prlimit reads; no old limits are asked.
    let set = unsafe {
        nix::libc::prlimit(
            pid as nix::libc::pid_t,
            nix::libc::RLIMIT_NOFILE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
}

#[test]
fn a_daemon_out_of_descriptors_backs_off_on_accept_and_serves_again_after() {
    let mut node = metrics_node("memfile");
    let pid = node.daemon_pid().unwrap();
    scrape_within(&node, Duration::from_secs(2)).expect("a scrape before the shortage");

    let limits = set_open_file_limit(pid, open_files(pid) as u64);
    // Queued in the kernel, each makes the daemon's accept fail with EMFILE for as long
    // as the shortage lasts.
    let waiting = connect_many(&node, 4);
    let cpu_before = node.daemon_cpu().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = node.daemon_cpu().unwrap() - cpu_before;
    let lines = accept_lines(&node);
    restore_open_file_limit(pid, limits);

    assert!(
        (1..=2).contains(&lines),
        "{lines} lines about failed accepts in 2 s:\n{}",
        node.log()
    );
    assert!(
        cpu < Duration::from_millis(500),
        "the daemon spent {cpu:?} of CPU in 2 s of failed accepts"
    );
    drop(waiting);
    let answer = scrape_within(&node, Duration::from_secs(2))
        .expect("a scrape within 2 s of the shortage's end");
    assert!(answer.contains("xwire_"), "{answer}");
    let (status, took) = timed_status(&node);
    assert_eq!(
        status.code, 0,
        "STATUS after the shortage: {}",
        status.output
    );
    assert!(took < Duration::from_secs(1), "STATUS took {took:?}");
}
