//! What a peer's Hello means for its connection: refused (the version, the name, the
//! address), a knock heard, or the peer up. A decision on plain data; the endpoint acts
//! on it.

use std::net::SocketAddr;

use xwire_proto::control::Hello;

use super::state::Peer;

/// QUIC application close codes for a refused peer.
pub(crate) const CLOSE_PROTOCOL: u32 = 1;
pub(crate) const CLOSE_NAME: u32 = 2;

/// Who a connection was, before its Hello arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opened {
    /// This node dialed (or knocked) peer `0`.
    ByThisNode(usize),
    /// The peer dialed from `0`; it names itself in its Hello.
    ByPeer(SocketAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No version in common: answer `UNSUPPORTED_VERSION`, then refuse.
    NoCommonVersion { reason: String },
    /// Refuse the connection with `code`.
    Refuse { code: u32, reason: String },
    /// A knock from `peer`, which this node dials: it restarted.
    KnockFrom { peer: usize },
    /// `peer` is up at `version`; `answer` says this node still owes its own Hello (it
    /// did not dial).
    Up {
        peer: usize,
        version: u16,
        answer: bool,
    },
}

/// Judges `theirs`, arriving on a connection `opened` as given, against this node's
/// Hello and peers. `certified` says the peer's certificate is for the name it gives.
pub(crate) fn judge(
    theirs: &Hello,
    ours: &Hello,
    opened: Opened,
    certified: bool,
    peers: &[Peer],
) -> Verdict {
    let Some(version) = theirs.negotiate(ours) else {
        return Verdict::NoCommonVersion {
            reason: format!(
                "{} speaks versions {}..={}",
                theirs.node_name, theirs.min_version, theirs.max_version
            ),
        };
    };
    if !certified {
        return Verdict::Refuse {
            code: CLOSE_NAME,
            reason: format!("Hello names {:?}, not its certificate", theirs.node_name),
        };
    }
    let remote = match opened {
        Opened::ByThisNode(peer) => {
            return Verdict::Up {
                peer,
                version,
                answer: false,
            }
        }
        Opened::ByPeer(remote) => remote,
    };
    if let Some(peer) = peers
        .iter()
        .position(|p| p.name == theirs.node_name && p.dials && !p.retired)
    {
        return Verdict::KnockFrom { peer };
    }
    // The peer is who its Hello (and certificate) say, and must be a configured peer at
    // the address it connects from, and not one that left the cluster.
    match peers
        .iter()
        .position(|p| p.name == theirs.node_name && p.addr.ip() == remote.ip() && !p.retired)
    {
        Some(peer) => Verdict::Up {
            peer,
            version,
            answer: true,
        },
        None => Verdict::Refuse {
            code: CLOSE_NAME,
            reason: format!(
                "{:?} at {remote} is not a configured peer",
                theirs.node_name
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use xwire_proto::control::Capabilities;

    use super::*;
    use crate::peer::Carrier;

    fn hello(name: &str, versions: (u16, u16)) -> Hello {
        Hello {
            min_version: versions.0,
            max_version: versions.1,
            ..Hello::current(name, Capabilities::DATAGRAM)
        }
    }

    fn peers() -> Vec<Peer> {
        let now = Instant::now();
        vec![
            // node-b dials node-c; node-a dials node-b.
            Peer::new(
                "node-b",
                "node-a",
                "192.0.2.1:1".parse().unwrap(),
                Carrier::Datagram,
                now,
            ),
            Peer::new(
                "node-b",
                "node-c",
                "192.0.2.3:1".parse().unwrap(),
                Carrier::Datagram,
                now,
            ),
        ]
    }

    #[test]
    fn each_hello_gets_its_verdict() {
        let ours = hello("node-b", (1, 2));
        let from = |ip: &str| Opened::ByPeer(format!("{ip}:999").parse().unwrap());
        let table: Vec<(Hello, Opened, bool, Verdict)> = vec![
            (
                hello("node-a", (3, 4)),
                from("192.0.2.1"),
                true,
                Verdict::NoCommonVersion {
                    reason: "node-a speaks versions 3..=4".into(),
                },
            ),
            (
                hello("node-a", (1, 5)),
                from("192.0.2.1"),
                false,
                Verdict::Refuse {
                    code: CLOSE_NAME,
                    reason: "Hello names \"node-a\", not its certificate".into(),
                },
            ),
            (
                hello("node-a", (1, 5)),
                from("192.0.2.1"),
                true,
                Verdict::Up {
                    peer: 0,
                    version: 2,
                    answer: true,
                },
            ),
            (
                hello("node-a", (1, 1)),
                from("192.0.2.77"),
                true,
                Verdict::Refuse {
                    code: CLOSE_NAME,
                    reason: "\"node-a\" at 192.0.2.77:999 is not a configured peer".into(),
                },
            ),
            (
                hello("node-z", (1, 1)),
                from("192.0.2.1"),
                true,
                Verdict::Refuse {
                    code: CLOSE_NAME,
                    reason: "\"node-z\" at 192.0.2.1:999 is not a configured peer".into(),
                },
            ),
            // node-c connecting to node-b, which dials it: a knock.
            (
                hello("node-c", (1, 2)),
                from("192.0.2.3"),
                true,
                Verdict::KnockFrom { peer: 1 },
            ),
            // The answer on node-b's own dial.
            (
                hello("node-c", (2, 2)),
                Opened::ByThisNode(1),
                true,
                Verdict::Up {
                    peer: 1,
                    version: 2,
                    answer: false,
                },
            ),
        ];
        let peers = peers();
        for (theirs, opened, certified, want) in table {
            assert_eq!(
                judge(&theirs, &ours, opened, certified, &peers),
                want,
                "{theirs:?} on {opened:?}"
            );
        }
    }

    #[test]
    fn a_retired_peer_is_refused_whichever_side_dials() {
        let ours = hello("node-b", (1, 2));
        let mut peers = peers();
        for peer in &mut peers {
            peer.retired = true;
        }
        for (name, ip) in [("node-a", "192.0.2.1"), ("node-c", "192.0.2.3")] {
            let opened = Opened::ByPeer(format!("{ip}:999").parse().unwrap());
            let verdict = judge(&hello(name, (1, 2)), &ours, opened, true, &peers);
            assert!(
                matches!(verdict, Verdict::Refuse { .. }),
                "{name}: {verdict:?}"
            );
        }
    }
}
