//! A Sync larger than one control record: 8000 waiting wires with the longest names
//! Kubernetes allows (about 4.7 MB of wire specs, over the 4 MiB record limit) go in
//! parts, and a node that restarts takes them all without dropping its peer.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::{call, eventually, Pod, TempDir};
use xwire_proto::control::{
    Carrier, ControlBody, ControlMessage, SyncBody, WireKey, WireSpec, MAX_CONTROL_BODY,
};
use xwire_testbed::checks::ping;

const WIRES: u64 = 8000;

/// The longest namespace name Kubernetes allows.
fn namespace() -> String {
    "s".repeat(63)
}

/// `pod`'s Topology: a link to `peer` for each uid, the pod placed on the node at
/// `node_ip`.
fn topology(
    pod: &str,
    peer: &str,
    uids: std::ops::Range<u64>,
    ip: Option<(&str, &str)>,
    node_ip: &str,
) -> serde_json::Value {
    let links: Vec<_> = uids
        .map(|uid| {
            let mut link = json!({
                "uid": uid, "peer_pod": peer,
                "local_intf": format!("e{uid}"), "peer_intf": format!("e{uid}"),
            });
            if let Some((local, remote)) = ip {
                link["local_ip"] = local.into();
                link["peer_ip"] = remote.into();
            }
            link
        })
        .collect();
    json!({
        "apiVersion": "networkop.co.uk/v1beta1", "kind": "Topology",
        "metadata": {"name": pod, "namespace": namespace()},
        "spec": {"links": links},
        "status": {"src_ip": node_ip},
    })
}

#[test]
fn a_sync_of_thousands_of_long_wires_goes_in_parts_and_a_restart_takes_it_whole() {
    let certs = TempDir::new("certs");
    let (mut n1, mut n2) = support::two_nodes(&certs);
    let far = "f".repeat(253); // on n1, never attached: its wires wait
    let near = "n".repeat(253); // on n2
    let whole_sync = ControlMessage {
        request_id: 0,
        body: ControlBody::Sync(SyncBody {
            wires: (0..WIRES)
                .map(|uid| WireSpec {
                    key: WireKey::new(namespace(), uid),
                    sender_pod: near.clone(),
                    sender_intf: format!("e{uid}"),
                    receiver_pod: far.clone(),
                    receiver_intf: format!("e{uid}"),
                    carrier: Carrier::Datagram,
                })
                .collect(),
            more: false,
        }),
    };
    let mut record = Vec::new();
    whole_sync.encode(&mut record);
    assert!(
        record.len() > MAX_CONTROL_BODY,
        "{} bytes fit one record",
        record.len()
    );
    let big = json!([
        topology(&far, &near, 0..WIRES, None, support::N1_IP),
        topology(&near, &far, 0..WIRES, None, support::N2_IP),
    ]);
    // Over the local API's 1 MiB request limit: written into each stopped node's store.
    let file = certs.0.join("big.json");
    std::fs::write(&file, serde_json::to_vec(&big).unwrap()).unwrap();
    for node in [&mut n1, &mut n2] {
        node.stop();
        support::apply_offline(node, &file);
        node.restart();
    }
    // A wire that is up, named to come last in every Sync.
    let pair = vec![
        topology(
            "zz-p",
            "zz-q",
            WIRES..WIRES + 1,
            Some(("10.0.0.1/30", "10.0.0.2/30")),
            support::N1_IP,
        ),
        topology(
            "zz-q",
            "zz-p",
            WIRES..WIRES + 1,
            Some(("10.0.0.2/30", "10.0.0.1/30")),
            support::N2_IP,
        ),
    ];
    n1.apply_objects(pair.clone());
    n2.apply_objects(pair);
    let config = |node: &support::Node| {
        let mut config = node.net_config("1.1.0");
        config["namespace"] = namespace().into();
        config
    };
    let (p, q) = (Pod::new("zz-p"), Pod::new("zz-q"));
    assert_eq!(call(&p, "ADD", &config(&n1)).code, 0);
    assert_eq!(call(&q, "ADD", &config(&n2)).code, 0);
    assert!(eventually(Duration::from_secs(10), || p.has(&format!("e{WIRES}"))));
    let started = Instant::now();
    let big_pod = Pod::new(&near);
    let added = call(&big_pod, "ADD", &config(&n2));
    assert_eq!(added.code, 0, "{}", added.output);
    eprintln!(
        "ADD of a pod with {WIRES} waiting wires: {:?}",
        started.elapsed()
    );

    // n1 restarts: n2's Sync to it lists every wire, in parts.
    n1.stop();
    let restarted = Instant::now();
    n1.restart();
    assert!(
        eventually(Duration::from_secs(30), || ping(&p.ns, "10.0.0.2", 1)
            .unwrap_or(false)),
        "the wire did not come back:\nn1:\n{}\nn2:\n{}",
        n1.log(),
        n2.log()
    );
    eprintln!("wire back after n1's restart: {:?}", restarted.elapsed());
    // And stays: the connection holds (a Sync over the record limit broke it each time).
    std::thread::sleep(Duration::from_secs(2));
    assert!(ping(&p.ns, "10.0.0.2", 3).unwrap());
    let log = n1.log();
    assert!(!log.contains("far end gone"), "{log}");
    assert!(!log.contains("refused"), "{log}");
    assert_eq!(log.matches("peer up").count(), 1, "{log}");
}
