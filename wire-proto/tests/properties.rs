//! Property tests: every message type survives encode then decode unchanged, and every
//! decoder answers truncated, oversized, wrong-version and random input with an error.

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{json, Value};
use xwire_proto::control::{
    next_control_record, Capabilities, Carrier, ControlBody, ControlMessage, ErrorBody, ErrorCode,
    Hello, SyncBody, WireKey, WireSpec,
};
use xwire_proto::data::{
    next_stream_frame, Datagram, DatagramBatch, FrameRepr, MAX_FRAME_LEN, MIN_FRAME_LEN,
};
use xwire_proto::local::{
    self, AddResult, Attachment, CniCall, CniError, CniInterface, CniIp, GcCall, PodRef, Request,
    Response, StatusCall,
};
use xwire_proto::{DecodeError, WireId};

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9.-]{0,20}"
}

fn wire_key() -> impl Strategy<Value = WireKey> {
    (name(), any::<u64>()).prop_map(|(namespace, link_uid)| WireKey {
        namespace,
        link_uid,
    })
}

fn wire_spec() -> impl Strategy<Value = WireSpec> {
    let carrier = prop_oneof![
        Just(Carrier::Datagram),
        Just(Carrier::Stream),
        Just(Carrier::Vxlan)
    ];
    (wire_key(), name(), name(), name(), name(), carrier).prop_map(
        |(key, sender_pod, sender_intf, receiver_pod, receiver_intf, carrier)| WireSpec {
            key,
            sender_pod,
            sender_intf,
            receiver_pod,
            receiver_intf,
            carrier,
        },
    )
}

fn control_body() -> impl Strategy<Value = ControlBody> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), name(), any::<u64>()).prop_map(|(a, b, node_name, caps)| {
            ControlBody::Hello(Hello {
                min_version: a.min(b),
                max_version: a.max(b),
                node_name,
                capabilities: Capabilities(caps),
            })
        }),
        wire_spec().prop_map(ControlBody::AddWire),
        wire_key().prop_map(ControlBody::DelWire),
        (vec(wire_spec(), 0..20), any::<bool>())
            .prop_map(|(wires, more)| ControlBody::Sync(SyncBody { wires, more })),
        Just(ControlBody::Ack),
        (any::<u16>(), ".{0,40}").prop_map(|(code, message)| ControlBody::Error(ErrorBody {
            code: ErrorCode(code),
            message
        })),
    ]
}

fn json_config() -> impl Strategy<Value = Value> {
    (name(), name(), vec((name(), any::<i64>()), 0..4)).prop_map(|(net, iface, extra)| {
        let mut v = json!({
            "cniVersion": "1.1.0",
            "name": net,
            "type": "xwire",
            "prevResult": {"interfaces": [{"name": iface}], "ips": []},
        });
        for (k, n) in extra {
            v[format!("x-{k}")] = json!(n);
        }
        v
    })
}

fn cni_call() -> impl Strategy<Value = CniCall> {
    (
        name(),
        name(),
        name(),
        name(),
        name(),
        vec((name(), ".{0,10}"), 0..5),
        json_config(),
    )
        .prop_map(
            |(container_id, netns, ifname, namespace, pod, args, config)| CniCall {
                cni_version: "1.1.0".into(),
                container_id,
                netns,
                ifname,
                pod: PodRef {
                    namespace,
                    name: pod,
                },
                args,
                config,
            },
        )
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        cni_call().prop_map(Request::Add),
        cni_call().prop_map(Request::Del),
        cni_call().prop_map(Request::Check),
        json_config().prop_map(|config| Request::Status(StatusCall {
            cni_version: "1.0.0".into(),
            config
        })),
        (json_config(), vec((name(), name()), 0..8)).prop_map(|(config, pairs)| {
            Request::Gc(GcCall {
                cni_version: "1.1.0".into(),
                config,
                valid_attachments: pairs
                    .into_iter()
                    .map(|(container_id, ifname)| Attachment {
                        container_id,
                        ifname,
                    })
                    .collect(),
            })
        }),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    let interface = (
        name(),
        proptest::option::of(any::<u32>()),
        proptest::option::of(name()),
    )
        .prop_map(|(name, mtu, sandbox)| CniInterface {
            name,
            mac: Some("02:00:00:00:00:01".into()),
            mtu,
            sandbox,
        });
    let ip = (any::<u8>(), any::<u32>()).prop_map(|(host, interface)| CniIp {
        address: format!("192.0.2.{host}/24"),
        gateway: None,
        interface,
    });
    prop_oneof![
        (vec(interface, 0..4), vec(ip, 0..4))
            .prop_map(|(interfaces, ips)| Response::Added(AddResult { interfaces, ips })),
        Just(Response::NotManaged),
        Just(Response::Ok),
        (any::<u32>(), ".{0,30}", ".{0,30}")
            .prop_map(|(code, msg, details)| Response::Error(CniError { code, msg, details })),
    ]
}

/// All of `frames` in one datagram (they fit: at most 40 frames of 2000 bytes).
fn datagram_of(frames: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut batch = DatagramBatch::new(65_000);
    for (uid, frame) in frames {
        batch.push(WireId(*uid), frame).unwrap();
    }
    batch.take().unwrap().to_vec()
}

fn frames() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    vec((any::<u64>(), vec(any::<u8>(), MIN_FRAME_LEN..2000)), 1..40)
}

proptest! {
    #[test]
    fn datagram_batches_round_trip(frames in frames(), room in 1200usize..65_000) {
        let mut batch = DatagramBatch::new(room);
        let mut packed = Vec::new();
        for (uid, frame) in &frames {
            if !batch.fits(frame.len()) {
                break;
            }
            batch.push(WireId(*uid), frame).unwrap();
            packed.push((*uid, frame.clone()));
        }
        let datagram = batch.take();
        prop_assume!(datagram.is_some());
        let datagram = datagram.unwrap();
        prop_assert!(datagram.len() <= room);
        let got: Vec<(u64, Vec<u8>)> = Datagram::new_checked(&datagram[..])
            .unwrap()
            .frames()
            .map(|f| (f.wire.0, f.frame.to_vec()))
            .collect();
        prop_assert_eq!(got, packed);
    }

    #[test]
    fn stream_records_round_trip(frames in frames()) {
        let mut wire = Vec::new();
        for (uid, frame) in &frames {
            let repr = FrameRepr { wire: WireId(*uid), frame };
            let start = wire.len();
            wire.resize(start + repr.buffer_len(), 0);
            repr.emit(&mut wire[start..]).unwrap();
        }
        let mut rest = &wire[..];
        for (uid, frame) in &frames {
            let (repr, used) = next_stream_frame(rest).unwrap().unwrap();
            prop_assert_eq!((repr.wire.0, repr.frame), (*uid, frame.as_slice()));
            rest = &rest[used..];
        }
        prop_assert!(rest.is_empty());
    }

    #[test]
    fn control_messages_round_trip(request_id in any::<u64>(), body in control_body()) {
        let msg = ControlMessage { request_id, body };
        let mut wire = Vec::new();
        msg.encode(&mut wire);
        let (decoded, used) = next_control_record(&wire).unwrap().unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(decoded.unwrap(), msg);
    }

    #[test]
    fn local_requests_round_trip(id in any::<u64>(), req in request()) {
        let mut wire = Vec::new();
        local::encode(id, &req, &mut wire);
        let (body, used) = local::next_record(&wire).unwrap().unwrap();
        prop_assert_eq!(used, wire.len());
        prop_assert_eq!(local::decode_request(body).unwrap(), (id, req));
    }

    #[test]
    fn local_responses_round_trip(id in any::<u64>(), resp in response()) {
        let mut wire = Vec::new();
        local::encode(id, &resp, &mut wire);
        prop_assert_eq!(local::decode_response(&wire[4..]).unwrap(), (id, resp));
    }

    #[test]
    fn truncated_datagrams_are_errors(frames in frames(), cut in any::<prop::sample::Index>()) {
        let buf = datagram_of(&frames);
        let cut = cut.index(buf.len());
        prop_assert!(Datagram::new_checked(&buf[..cut]).is_err());
    }

    #[test]
    fn truncated_control_records_wait_for_more(body in control_body(), cut in any::<prop::sample::Index>()) {
        let mut wire = Vec::new();
        ControlMessage { request_id: 1, body }.encode(&mut wire);
        let cut = cut.index(wire.len());
        prop_assert_eq!(next_control_record(&wire[..cut]).unwrap(), None);
    }

    #[test]
    fn truncated_control_bodies_are_errors(body in control_body(), cut in any::<prop::sample::Index>()) {
        prop_assume!(!matches!(body, ControlBody::Ack));
        let mut wire = Vec::new();
        ControlMessage { request_id: 1, body: body.clone() }.encode(&mut wire);
        let cut = 4 + cut.index(wire.len() - 4);
        let decoded = ControlMessage::decode(&wire[4..cut]);
        match body {
            // A Sync without its last byte is a Sync as version 1 sends it: whole, with
            // `more` absent (false).
            ControlBody::Sync(sync) if cut == wire.len() - 1 => prop_assert_eq!(
                decoded.unwrap().body,
                ControlBody::Sync(SyncBody { more: false, ..sync })
            ),
            _ => prop_assert!(decoded.is_err()),
        }
    }

    #[test]
    fn truncated_local_bodies_are_errors(req in request(), cut in any::<prop::sample::Index>()) {
        let mut wire = Vec::new();
        local::encode(1, &req, &mut wire);
        let cut = 4 + cut.index(wire.len() - 4);
        prop_assert!(local::decode_request(&wire[4..cut]).is_err());
    }

    #[test]
    fn wrong_version_datagrams_are_refused(frames in frames(), version in 2u8..) {
        let mut buf = datagram_of(&frames);
        buf[0] = version;
        prop_assert_eq!(
            Datagram::new_checked(&buf[..]).unwrap_err(),
            DecodeError::UnsupportedVersion(version.into())
        );
    }

    #[test]
    fn wrong_version_local_messages_are_refused(req in request(), version in 2u32..) {
        let mut v = serde_json::json!({"version": version, "id": 1});
        v["body"] = serde_json::to_value(&req).unwrap();
        prop_assert_eq!(
            local::decode_request(v.to_string().as_bytes()).unwrap_err(),
            DecodeError::UnsupportedVersion(version)
        );
    }

    #[test]
    fn random_input_never_panics(bytes in vec(any::<u8>(), 0..4096)) {
        if let Ok(d) = Datagram::new_checked(&bytes[..]) {
            prop_assert_eq!(d.frames().count(), d.frame_count());
        }
        let _ = next_stream_frame(&bytes);
        let _ = next_control_record(&bytes);
        let _ = ControlMessage::decode(&bytes);
        let _ = local::next_record(&bytes);
        let _ = local::decode_request(&bytes);
        let _ = local::decode_response(&bytes);
    }

    #[test]
    fn oversized_lengths_are_refused(extra in 1usize..1_000_000) {
        let control_len = (xwire_proto::control::MAX_CONTROL_BODY + extra) as u32;
        let refused = matches!(
            next_control_record(&control_len.to_be_bytes()),
            Err(DecodeError::TooLong { .. })
        );
        prop_assert!(refused);
        let local_len = (xwire_proto::local::MAX_LOCAL_BODY + extra) as u32;
        let refused = matches!(
            local::next_record(&local_len.to_be_bytes()),
            Err(DecodeError::TooLong { .. })
        );
        prop_assert!(refused);
    }
}

#[test]
fn the_largest_frame_fits_a_record() {
    let frame = vec![7u8; MAX_FRAME_LEN];
    let repr = FrameRepr {
        wire: WireId(1),
        frame: &frame,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    assert_eq!(FrameRepr::parse(&buf).unwrap().0, repr);
}
