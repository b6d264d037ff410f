//! Golden bytes: each record type as literal bytes, the very examples FORMAT.md shows.
//! Each is checked both ways, encoding to exactly these bytes and decoding from them,
//! so that a change to encoder and decoder alike cannot pass unnoticed.

use xwire_proto::control::{
    next_control_record, Capabilities, Carrier, ControlBody, ControlMessage, ErrorBody, ErrorCode,
    Hello, SyncBody, WireKey, WireSpec,
};
use xwire_proto::data::{
    next_stream_frame, parse_stream_preamble, stream_preamble, Datagram, DatagramBatch, FrameRepr,
    StreamKind,
};
use xwire_proto::local::{self, Request, Response};
use xwire_proto::WireId;

fn spec() -> WireSpec {
    WireSpec {
        key: WireKey {
            namespace: "lab".into(),
            link_uid: 7,
        },
        sender_pod: "r1".into(),
        sender_intf: "eth1".into(),
        receiver_pod: "r2".into(),
        receiver_intf: "eth2".into(),
        carrier: Carrier::Stream,
    }
}

/// Encodes to exactly `bytes`, and decodes from them to `message`.
fn both_ways(message: ControlMessage, bytes: &[u8]) {
    let mut encoded = Vec::new();
    message.encode(&mut encoded);
    assert_eq!(encoded, bytes, "{message:?} encodes otherwise");
    let (decoded, used) = next_control_record(bytes).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(decoded.unwrap(), message);
}

#[rustfmt::skip]
#[test]
fn control_messages() {
    both_ways(
        ControlMessage {
            request_id: 1,
            body: ControlBody::Hello(Hello {
                min_version: 1,
                max_version: 2,
                node_name: "n1".into(),
                capabilities: Capabilities(3),
            }),
        },
        &[0, 0, 0, 0x0f, 1, 0, 0, 0, 0, 0, 0, 0, 1,
          1, 2, 2, b'n', b'1', 3],
    );
    both_ways(
        ControlMessage { request_id: 2, body: ControlBody::AddWire(spec()) },
        &[0, 0, 0, 0x1f, 2, 0, 0, 0, 0, 0, 0, 0, 2,
          3, b'l', b'a', b'b', 7,
          2, b'r', b'1', 4, b'e', b't', b'h', b'1',
          2, b'r', b'2', 4, b'e', b't', b'h', b'2',
          1],
    );
    // A VXLAN wire's carrier is the enum's third index.
    both_ways(
        ControlMessage {
            request_id: 2,
            body: ControlBody::AddWire(WireSpec { carrier: Carrier::Vxlan, ..spec() }),
        },
        &[0, 0, 0, 0x1f, 2, 0, 0, 0, 0, 0, 0, 0, 2,
          3, b'l', b'a', b'b', 7,
          2, b'r', b'1', 4, b'e', b't', b'h', b'1',
          2, b'r', b'2', 4, b'e', b't', b'h', b'2',
          2],
    );
    both_ways(
        ControlMessage { request_id: 3, body: ControlBody::DelWire(spec().key) },
        &[0, 0, 0, 0x0e, 3, 0, 0, 0, 0, 0, 0, 0, 3,
          3, b'l', b'a', b'b', 7],
    );
    both_ways(
        ControlMessage {
            request_id: 4,
            body: ControlBody::Sync(SyncBody { wires: vec![spec()], more: true }),
        },
        &[0, 0, 0, 0x21, 4, 0, 0, 0, 0, 0, 0, 0, 4,
          1,
          3, b'l', b'a', b'b', 7,
          2, b'r', b'1', 4, b'e', b't', b'h', b'1',
          2, b'r', b'2', 4, b'e', b't', b'h', b'2',
          1,
          1],
    );
    both_ways(
        ControlMessage { request_id: 2, body: ControlBody::Ack },
        &[0, 0, 0, 0x09, 5, 0, 0, 0, 0, 0, 0, 0, 2],
    );
    both_ways(
        ControlMessage {
            request_id: 77,
            body: ControlBody::Error(ErrorBody {
                code: ErrorCode::UNKNOWN_TYPE,
                message: "no".into(),
            }),
        },
        &[0, 0, 0, 0x0d, 6, 0, 0, 0, 0, 0, 0, 0, 0x4d,
          2, 2, b'n', b'o'],
    );
}

#[rustfmt::skip]
#[test]
fn a_frame_record_a_datagram_and_stream_preambles() {
    let record = [0, 0, 0, 0, 0, 0, 0, 7, 0, 14,
                  0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa];
    let mut encoded = vec![0; record.len()];
    FrameRepr { wire: WireId(7), frame: &[0xaa; 14] }.emit(&mut encoded).unwrap();
    assert_eq!(encoded, record);
    let (parsed, used) = FrameRepr::parse(&record).unwrap();
    assert_eq!((parsed.wire.0, parsed.frame, used), (7, &[0xaa; 14][..], record.len()));

    let datagram = [1, 0, 0, 2,
                    0, 0, 0, 0, 0, 0, 0, 7, 0, 14,
                    0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
                    0, 0, 0, 0, 0, 0, 0x01, 0x2c, 0, 14,
                    0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb, 0xbb];
    let mut batch = DatagramBatch::new(1200);
    batch.push(WireId(7), &[0xaa; 14]).unwrap();
    batch.push(WireId(300), &[0xbb; 14]).unwrap();
    assert_eq!(&batch.take().unwrap()[..], &datagram[..]);
    let frames: Vec<(u64, Vec<u8>)> = Datagram::new_checked(&datagram[..])
        .unwrap()
        .frames()
        .map(|f| (f.wire.0, f.frame.to_vec()))
        .collect();
    assert_eq!(frames, [(7, vec![0xaa; 14]), (300, vec![0xbb; 14])]);

    assert_eq!(stream_preamble(StreamKind::Control), [1, 0]);
    assert_eq!(stream_preamble(StreamKind::Data), [1, 1]);
    assert_eq!(parse_stream_preamble(&[1, 1]), Ok(StreamKind::Data));
    let (frame, used) = next_stream_frame(&record).unwrap().unwrap();
    assert_eq!((frame.wire.0, used), (7, record.len()));
}

#[test]
fn local_api_records() {
    let request = b"\x00\x00\x00\x2d{\"version\":1,\"id\":42,\"body\":{\"type\":\"state\"}}";
    let mut encoded = Vec::new();
    local::encode(42, &Request::State, &mut encoded);
    assert_eq!(encoded, request);
    assert_eq!(
        local::decode_request(&request[4..]).unwrap(),
        (42, Request::State)
    );
    let response = b"\x00\x00\x00\x2a{\"version\":1,\"id\":42,\"body\":{\"type\":\"ok\"}}";
    let mut encoded = Vec::new();
    local::encode(42, &Response::Ok, &mut encoded);
    assert_eq!(encoded, response);
    assert_eq!(
        local::decode_response(&response[4..]).unwrap(),
        (42, Response::Ok)
    );
}
