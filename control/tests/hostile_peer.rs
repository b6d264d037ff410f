//! A configured peer turned hostile (issue 37, item 2): in n2's place, with n2's address
//! and certificate, a node that speaks the control protocol and sends n1 three Sync
//! messages of claims to wires n1 has never heard of, each near the 4 MiB record limit.
//! n1 refuses and counts every one on its peer desk's thread (none reaches the thread
//! that answers its local API), keeps answering that API within a second throughout, and
//! neither its memory nor its log grows with the number of claims.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::{call, eventually, Pod, TempDir};
use xwire_fastpath::peer::{Carrier, ControlMessage, NodeIdentity, PeerConfig, PeerEvent};
use xwire_fastpath::{Worker, WorkerConfig};
use xwire_proto::control::{ControlBody, SyncBody, WireKey, WireSpec, MAX_CONTROL_BODY};

/// Sync messages the rogue sends, one right after the other.
const SYNCS: usize = 4;

/// A Sync of claims to `count` wires of pods that no topology on n1 has.
fn bogus_sync(first: usize, count: usize) -> ControlBody {
    let wires = (first..first + count)
        .map(|i| WireSpec {
            key: WireKey::new("lab", i as u64),
            sender_pod: format!("rogue-{i}"),
            sender_intf: "eth1".into(),
            receiver_pod: format!("victim-{i}"),
            receiver_intf: "eth1".into(),
            carrier: Carrier::Datagram,
        })
        .collect();
    ControlBody::Sync(SyncBody { wires, more: false })
}

/// As many claims as fit in one control record, with room to spare.
fn claims_per_sync() -> usize {
    let mut count = 1000;
    loop {
        let mut encoded = Vec::new();
        ControlMessage {
            request_id: 1,
            body: bogus_sync(0, count * 2),
        }
        .encode(&mut encoded);
        if encoded.len() > MAX_CONTROL_BODY * 9 / 10 {
            return count;
        }
        count *= 2;
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn a_peer_flooding_claims_is_refused_in_bounded_memory_and_log_and_cni_is_answered() {
    let certs = TempDir::new("certs-hostile");
    let (mut n1, mut n2) = support::two_nodes(&certs);
    n1.apply(&support::pair_topology(
        "r1",
        "r2",
        &[(1, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30")],
    ));
    // n2's daemon goes; the rogue takes its address and certificate.
    n2.stop();
    let identity = NodeIdentity::load(
        "n2",
        &certs.0.join("n2.pem"),
        &certs.0.join("n2.key"),
        &certs.0.join("ca.pem"),
    )
    .unwrap();
    let rogue = n2
        .ns
        .run(|| Worker::spawn(WorkerConfig::default()))
        .unwrap()
        .unwrap();
    let listen: SocketAddr = "192.168.77.2:7470".parse().unwrap();
    rogue
        .attach_peers(PeerConfig::new(identity, listen))
        .unwrap();
    let n1_peer = rogue
        .add_peer(
            "n1",
            "192.168.77.1:7470".parse().unwrap(),
            Carrier::Datagram,
        )
        .unwrap();
    let up = eventually(Duration::from_secs(10), || {
        let (_, events) = rogue.peer_status().unwrap();
        events.iter().any(|e| matches!(e, PeerEvent::Up { .. }))
    });
    assert!(up, "the rogue never got a connection to n1:\n{}", n1.log());

    let pid = n1.daemon_pid().unwrap();
    let rss_before = rss_kib(pid);
    let log_before = n1.log().len();
    let before = n1.state();
    let refused_before = before.refused_claims;
    let per_sync = claims_per_sync();
    let started = Instant::now();
    for i in 0..SYNCS {
        let message = ControlMessage {
            request_id: 100 + i as u64,
            body: bogus_sync(i * per_sync, per_sync),
        };
        assert!(rogue.send_control(n1_peer, message).unwrap());
    }

    // While n1 works through them, its local API answers: a CNI ADD, and state reads.
    let r1 = Pod::new("r1");
    let asked = Instant::now();
    let added = call(&r1, "ADD", &n1.net_config("1.1.0"));
    let add_took = asked.elapsed();
    assert_eq!(added.code, 0, "{}", added.output);
    let mut slowest = add_took;
    let total = (SYNCS * per_sync) as u64;
    let mut refused = 0;
    while started.elapsed() < Duration::from_secs(60) {
        let asked = Instant::now();
        refused = n1.state().refused_claims - refused_before;
        slowest = slowest.max(asked.elapsed());
        if refused >= total {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed();
    let rss_after = rss_kib(pid);
    let log_grew = n1.log().len() - log_before;
    eprintln!(
        "{total} claims in {SYNCS} Syncs: refused {refused} in {took:?}; slowest answer {slowest:?} \
         (ADD {add_took:?}); RSS {rss_before} -> {rss_after} KiB; log +{log_grew} bytes"
    );
    assert_eq!(refused, total, "every claim is refused and counted");
    assert_eq!(
        n1.state().claims_judged_by_node,
        before.claims_judged_by_node,
        "a claim the desk refused reached the node's thread"
    );
    assert!(add_took < Duration::from_secs(1), "ADD took {add_took:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "an answer took {slowest:?}"
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    assert!(
        log_grew < 4096,
        "the log grew by {log_grew} bytes:\n{}",
        n1.log()
    );
    assert!(n1.log().contains("claim refused"), "{}", n1.log());
    n1.stop();
}
