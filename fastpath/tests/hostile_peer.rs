//! A peer that misbehaves: a real QUIC client (quinn) holding a certificate from the
//! cluster's CA, speaking to a real `PeerTransport` on loopback. It sends what xwire
//! never would (control messages before Hello, a second Hello, records that do not
//! decode, thousands of streams and messages), and connects from addresses that are no
//! peer's. The transport must refuse, answer or bound each, and never grow without end.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use support::TestNode;
use xwire_fastpath::peer::{
    Carrier, ControlMessage, Flush, NodeIdentity, PeerConfig, PeerEvent, PeerId, PeerTransport,
};
use xwire_pki::ClusterCa;
use xwire_proto::control::{
    next_control_record, Capabilities, ControlBody, ErrorCode, Hello, SyncBody, WireKey, WireSpec,
};
use xwire_proto::data::{stream_preamble, FrameRepr, StreamKind, STREAM_PREAMBLE_LEN};
use xwire_proto::framing::append_record;

/// The node under test listens here; the rogue connects from `ROGUE_IP`.
const NODE: &str = "127.0.0.1:0";
const ROGUE_IP: &str = "127.0.0.2";

struct Setup {
    node: PeerTransport,
    rogue_id: NodeIdentity,
    /// The rogue, as the node numbers its peers.
    rogue: PeerId,
}

/// node-b, which knows node-a (the rogue's name, which sorts first: node-b only
/// answers) at `ROGUE_IP`.
fn setup() -> Setup {
    let ca = ClusterCa::generate("xwire-test-ca").unwrap();
    let mut node = PeerTransport::bind(PeerConfig::new(
        ca.issue("node-b").unwrap(),
        NODE.parse().unwrap(),
    ))
    .unwrap();
    let rogue = node
        .add_peer(
            "node-a",
            format!("{ROGUE_IP}:9").parse().unwrap(),
            Carrier::Datagram,
        )
        .unwrap();
    Setup {
        node,
        rogue_id: ca.issue("node-a").unwrap(),
        rogue,
    }
}

fn client_config(id: &NodeIdentity) -> quinn::ClientConfig {
    let chain = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(id.ca_pem.as_bytes()) {
        roots.add(ca.unwrap()).unwrap();
    }
    let provider = Arc::new(xwire_pki::tls::provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    tls.alpn_protocols = vec![b"xwire/1".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(2).try_into().unwrap()));
    config.transport_config(Arc::new(transport));
    config
}

/// How the node is run while a script plays.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    /// Polled, and its events taken (as the worker and control plane do).
    Polled,
    /// Polled, but nobody takes its events (a control plane that is stuck).
    EventsLeft,
    /// Not polled at all (a node busy elsewhere).
    Idle,
}

/// Runs `script` against the node on a thread of its own (with its own runtime), and
/// runs the node here as `run` says until the script ends; returns what the script
/// returned and the events taken.
fn against_node<T: Send + 'static>(
    setup: &mut Setup,
    from_ip: &str,
    script: impl FnOnce(quinn::Endpoint, SocketAddr, NodeIdentity) -> T + Send + 'static,
    run: Run,
) -> (T, Vec<PeerEvent>) {
    against_node_doing(setup, from_ip, script, run, |_| {})
}

/// As `against_node`, calling `each_pass` with the node after each of its polls.
fn against_node_doing<T: Send + 'static>(
    setup: &mut Setup,
    from_ip: &str,
    script: impl FnOnce(quinn::Endpoint, SocketAddr, NodeIdentity) -> T + Send + 'static,
    run: Run,
    mut each_pass: impl FnMut(&mut PeerTransport),
) -> (T, Vec<PeerEvent>) {
    let node_addr = setup.node.local_addr();
    let id = setup.rogue_id.clone();
    let bind: SocketAddr = format!("{from_ip}:0").parse().unwrap();
    let rogue = std::thread::spawn(move || {
        // A worker thread drives the client's I/O while the script waits on it.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let _guard = runtime.enter();
        let mut endpoint = quinn::Endpoint::client(bind).unwrap();
        endpoint.set_default_client_config(client_config(&id));
        script(endpoint, node_addr, id)
    });
    let mut events = Vec::new();
    let limit = Instant::now() + Duration::from_secs(30);
    while !rogue.is_finished() {
        assert!(Instant::now() < limit, "the script did not end");
        if run != Run::Idle {
            setup.node.poll_frames(Flush::Now, &mut |_, _, _| false);
            each_pass(&mut setup.node);
        }
        if run == Run::Polled {
            events.extend(setup.node.take_events());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    (rogue.join().unwrap(), events)
}

/// Runs a future to its end on the script's runtime.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Handle::current().block_on(f)
}

fn record(message: &ControlMessage) -> Vec<u8> {
    let mut out = Vec::new();
    message.encode(&mut out);
    out
}

fn hello() -> ControlMessage {
    ControlMessage {
        request_id: 0,
        body: ControlBody::Hello(Hello::current(
            "node-a",
            Capabilities::DATAGRAM.union(Capabilities::STREAM),
        )),
    }
}

fn del_wire(request_id: u64) -> ControlMessage {
    ControlMessage {
        request_id,
        body: ControlBody::DelWire(WireKey::new("lab", 3)),
    }
}

/// The control stream as the rogue sees it: bytes in, records out.
struct ControlStream {
    send: quinn::SendStream,
    recv: quinn::RecvStream,
    buf: Vec<u8>,
    skipped_preamble: bool,
}

impl ControlStream {
    fn open(conn: &quinn::Connection) -> ControlStream {
        let (mut send, recv) = block(conn.open_bi()).unwrap();
        block(send.write_all(&stream_preamble(StreamKind::Control))).unwrap();
        ControlStream {
            send,
            recv,
            buf: Vec::new(),
            skipped_preamble: false,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        block(self.send.write_all(bytes)).unwrap();
    }

    /// The next message the node sends, within a few seconds.
    fn next(&mut self) -> ControlMessage {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if !self.skipped_preamble && self.buf.len() >= STREAM_PREAMBLE_LEN {
                self.buf.drain(..STREAM_PREAMBLE_LEN);
                self.skipped_preamble = true;
            }
            if self.skipped_preamble {
                if let Some((message, used)) = next_control_record(&self.buf).unwrap() {
                    self.buf.drain(..used);
                    return message.unwrap();
                }
            }
            assert!(Instant::now() < deadline, "the node sent nothing");
            let chunk = block(tokio::time::timeout(
                Duration::from_millis(100),
                self.recv.read_chunk(64 << 10, true),
            ));
            if let Ok(Ok(Some(chunk))) = chunk {
                self.buf.extend_from_slice(&chunk.bytes);
            }
        }
    }
}

fn connect(endpoint: &quinn::Endpoint, node: SocketAddr) -> quinn::Connection {
    block(endpoint.connect(node, "node-b").unwrap()).unwrap()
}

/// A connection whose Hellos are exchanged, and its control stream.
fn connect_with_hello(
    endpoint: &quinn::Endpoint,
    node: SocketAddr,
) -> (quinn::Connection, ControlStream) {
    let conn = connect(endpoint, node);
    let mut control = ControlStream::open(&conn);
    control.send(&record(&hello()));
    assert!(matches!(control.next().body, ControlBody::Hello(_)));
    (conn, control)
}

/// A data stream's bytes: the preamble and one frame for link `uid`.
fn data_stream_bytes(uid: u64, frame: &[u8]) -> Vec<u8> {
    let mut bytes = stream_preamble(StreamKind::Data).to_vec();
    let repr = FrameRepr {
        wire: xwire_proto::WireId(uid),
        frame,
    };
    let at = bytes.len();
    bytes.resize(at + repr.buffer_len(), 0);
    repr.emit(&mut bytes[at..]).unwrap();
    bytes
}

#[test]
fn a_second_hello_and_undecodable_messages_get_errors_and_the_connection_stays() {
    let mut setup = setup();
    let (answers, events) = against_node(
        &mut setup,
        ROGUE_IP,
        |endpoint, node, _| {
            let conn = connect(&endpoint, node);
            let mut control = ControlStream::open(&conn);
            control.send(&record(&hello()));
            let their_hello = control.next();
            control.send(&record(&ControlMessage {
                request_id: 5,
                ..hello()
            }));
            let second_hello = control.next();
            // A type this build does not know, with request id 77.
            let mut unknown = Vec::new();
            append_record::<()>(&mut unknown, |b| {
                b.push(200);
                b.extend_from_slice(&77u64.to_be_bytes());
                b.extend_from_slice(b"from the future");
                Ok(())
            })
            .unwrap();
            control.send(&unknown);
            let unknown_answer = control.next();
            // An AddWire whose fields are garbage, request id 78.
            let mut garbage = Vec::new();
            append_record::<()>(&mut garbage, |b| {
                b.push(2);
                b.extend_from_slice(&78u64.to_be_bytes());
                b.extend_from_slice(&[0xff; 3]);
                Ok(())
            })
            .unwrap();
            control.send(&garbage);
            let garbage_answer = control.next();
            // Still connected: a good message goes through.
            control.send(&record(&del_wire(79)));
            std::thread::sleep(Duration::from_millis(300));
            let open = conn.close_reason().is_none();
            [their_hello, second_hello, unknown_answer, garbage_answer]
                .map(|m| (m.request_id, m.body))
                .into_iter()
                .chain(std::iter::once((u64::from(open), ControlBody::Ack)))
                .collect::<Vec<_>>()
        },
        Run::Polled,
    );
    assert!(matches!(answers[0].1, ControlBody::Hello(_)), "{answers:?}");
    let error = |i: usize| match &answers[i].1 {
        ControlBody::Error(e) => (answers[i].0, e.code),
        other => panic!("answer {i}: {other:?}"),
    };
    assert_eq!(error(1), (5, ErrorCode::CONFLICT));
    assert_eq!(error(2), (77, ErrorCode::UNKNOWN_TYPE));
    assert_eq!(error(3), (78, ErrorCode::MALFORMED));
    assert_eq!(answers[4].0, 1, "the node closed the connection");
    let ups = events
        .iter()
        .filter(|e| matches!(e, PeerEvent::Up { .. }))
        .count();
    assert_eq!(ups, 1, "one Up, however many Hellos: {events:?}");
    assert!(
        events.iter().any(|e| matches!(
            e,
            PeerEvent::Control { message, .. } if message.request_id == 79
        )),
        "{events:?}"
    );
    let counters = setup.node.counters();
    assert_eq!(counters.control_refused, 3, "{counters:?}");
    assert_eq!(counters.malformed, 2, "{counters:?}");
}

#[test]
fn nothing_but_hello_is_read_before_hello() {
    let mut setup = setup();
    let (closed, events) = against_node(
        &mut setup,
        ROGUE_IP,
        |endpoint, node, _| {
            let conn = connect(&endpoint, node);
            // A data stream with a frame, then a control stream that starts with an
            // AddWire-like message instead of Hello.
            let mut data = block(conn.open_uni()).unwrap();
            block(data.write_all(&data_stream_bytes(7, &[0xab; 100]))).unwrap();
            let mut control = ControlStream::open(&conn);
            control.send(&record(&del_wire(1)));
            block(tokio::time::timeout(Duration::from_secs(5), conn.closed())).is_ok()
        },
        Run::Polled,
    );
    assert!(closed, "the node kept a connection that skipped Hello");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, PeerEvent::Control { .. } | PeerEvent::Up { .. })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            PeerEvent::Refused { reason, .. } if reason.contains("before Hello")
        )),
        "{events:?}"
    );
    let counters = setup.node.counters();
    assert_eq!(counters.frames_received + counters.dropped_unknown_link, 0);
}

#[test]
fn the_state_of_streams_the_peer_ends_is_freed() {
    let mut setup = setup();
    let (sent, _) = against_node(
        &mut setup,
        ROGUE_IP,
        |endpoint, node, _| {
            let (conn, _control) = connect_with_hello(&endpoint, node);
            let bytes = data_stream_bytes(7, &[0x5a; 64]);
            for _ in 0..300 {
                let mut data = block(conn.open_uni()).unwrap();
                block(data.write_all(&bytes)).unwrap();
                data.finish().unwrap();
            }
            // Some streams that end without a byte, and some reset half-way.
            for _ in 0..50 {
                let mut data = block(conn.open_uni()).unwrap();
                block(data.write_all(&stream_preamble(StreamKind::Data)[..1])).unwrap();
                data.reset(0u32.into()).unwrap();
            }
            std::thread::sleep(Duration::from_millis(500));
            300
        },
        Run::Polled,
    );
    for _ in 0..50 {
        setup.node.poll_frames(Flush::Now, &mut |_, _, _| false);
    }
    let counters = setup.node.counters();
    assert_eq!(counters.dropped_unknown_link, sent, "{counters:?}");
    // At most the control stream (its connection may not have drained yet), and
    // nothing of the 350 data streams.
    let held = setup.node.streams_held();
    assert!(held <= 1, "{held} streams' state outlived them");
}

#[test]
fn handshakes_from_addresses_that_are_no_peers_are_not_begun() {
    let mut setup = setup();
    let (connected, events) = against_node(
        &mut setup,
        "127.0.0.3",
        |endpoint, node, _| {
            let attempt = endpoint.connect(node, "node-b").unwrap();
            block(tokio::time::timeout(Duration::from_secs(3), attempt)).is_ok_and(|c| c.is_ok())
        },
        Run::Polled,
    );
    assert!(!connected);
    assert!(!events.iter().any(|e| matches!(e, PeerEvent::Up { .. })));
    assert!(setup.node.counters().handshakes_refused > 0);
}

#[test]
fn handshakes_in_progress_are_bounded() {
    let mut setup = setup();
    // A hundred handshakes arrive while the node is busy elsewhere (not polled).
    let (_, _) = against_node(
        &mut setup,
        ROGUE_IP,
        |endpoint, node, _| {
            let attempts: Vec<_> = (0..100)
                .map(|_| endpoint.connect(node, "node-b").unwrap())
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            drop(attempts);
        },
        Run::Idle,
    );
    for _ in 0..8 {
        setup.node.poll_frames(Flush::Now, &mut |_, _, _| false);
    }
    // Past two from one address, a handshake is first answered with a Retry; past eight,
    // refused outright.
    let counters = setup.node.counters();
    let (refused, retried) = (counters.handshakes_refused, counters.handshakes_retried);
    assert!(
        refused + retried >= 90,
        "{refused} of 100 refused and {retried} retried (8 may be in progress)"
    );
}

#[test]
fn control_messages_beyond_the_event_queue_are_dropped_counted_and_the_connection_closed() {
    let mut setup = setup();
    let sent = 70_000u64;
    let (closed, _) = against_node(
        &mut setup,
        ROGUE_IP,
        move |endpoint, node, _| {
            let (conn, mut control) = connect_with_hello(&endpoint, node);
            let mut burst = Vec::new();
            for id in 0..sent {
                del_wire(id).encode(&mut burst);
            }
            let _ = block(tokio::time::timeout(
                Duration::from_secs(10),
                control.send.write_all(&burst),
            ));
            block(tokio::time::timeout(Duration::from_secs(10), conn.closed())).is_ok()
        },
        Run::EventsLeft,
    );
    let _ = closed;
    let mut events = Vec::new();
    let limit = Instant::now() + Duration::from_secs(20);
    while setup.node.counters().control_dropped == 0 && Instant::now() < limit {
        setup.node.poll_frames(Flush::Now, &mut |_, _, _| false);
    }
    events.extend(setup.node.take_events());
    let counters = setup.node.counters();
    assert!(counters.control_dropped > 0, "{counters:?}");
    assert!(events.len() <= 1 << 16, "{} events held", events.len());
}

#[test]
fn a_peer_that_does_not_read_its_control_stream_loses_its_connection_not_our_memory() {
    let mut setup = setup();
    let peer = setup.rogue;
    // A Sync of about 1 MiB: what a node may well send, over and over.
    let big = ControlMessage {
        request_id: 0,
        body: ControlBody::Sync(SyncBody {
            wires: (0..2500)
                .map(|uid| WireSpec {
                    key: WireKey::new("lab", uid),
                    sender_pod: "p".repeat(200),
                    sender_intf: "eth1".into(),
                    receiver_pod: "q".repeat(200),
                    receiver_intf: "eth1".into(),
                    carrier: Carrier::Datagram,
                })
                .collect(),
            more: false,
        }),
    };
    let mut sent = 0;
    let mut refused = false;
    let (closed, _) = against_node_doing(
        &mut setup,
        ROGUE_IP,
        |endpoint, node, _| {
            let (conn, _control) = connect_with_hello(&endpoint, node);
            // And never reads again.
            block(tokio::time::timeout(Duration::from_secs(20), conn.closed())).is_ok()
        },
        Run::Polled,
        |node| {
            while node.is_up(peer) && !refused && sent < 200 {
                if node.send_control(peer, &big) {
                    sent += 1;
                } else {
                    refused = true;
                }
            }
        },
    );
    assert!(
        refused,
        "{sent} messages of 1 MiB queued for a peer that reads none"
    );
    assert!(closed, "the connection stayed open");
    assert_eq!(setup.node.counters().control_dropped, 1);
}
