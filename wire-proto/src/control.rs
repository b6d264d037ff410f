//! Control messages between node daemons, carried on the control stream of a peer
//! connection (a stream opened with `data::StreamKind::Control`).
//!
//! A record is the shared length prefix, then a type byte, a request id (u64, big-endian)
//! and the message's fields encoded with postcard. The type byte sits outside the postcard
//! payload so that a reader can recognise, skip and answer a type it does not know; the
//! payload uses postcard because its format is specified, stable and compact, and serde
//! keeps the field lists in one place.

use serde::{Deserialize, Serialize};

use crate::framing::{append_record, split_record};
use crate::DecodeError;

/// The protocol version this build speaks best, and the oldest it still speaks. Version 2
/// adds `SyncBody::more`: a Sync may come in parts. Version 3 changes how a wire's id is
/// made (`WireId::new`, a SHA-256 digest): a node of an older version would tag the same
/// wire with another id and never find the other's frames, so it is refused at Hello,
/// with a reason, rather than joined to wires that carry nothing.
pub const PROTOCOL_VERSION: u16 = 3;
pub const MIN_PROTOCOL_VERSION: u16 = 3;
/// The largest record body accepted.
pub const MAX_CONTROL_BODY: usize = 4 << 20;
/// The most bytes of wire specs one part of a Sync carries: well under
/// `MAX_CONTROL_BODY` whatever the names' lengths.
pub const MAX_SYNC_PART: usize = 1 << 20;
/// Type byte plus request id.
const MESSAGE_HEADER_LEN: usize = 9;

/// The longest node name: a DNS name, as Kubernetes node names are.
pub(crate) const MAX_NODE_NAME: usize = 253;

/// Whether `name` can name a node: a DNS name of lower-case letters, digits, '-' and
/// '.', each dot-separated label 1 to 63 long and neither starting nor ending with '-'.
/// Node names become certificate names (no wildcards), file names (no '/') and Hello's
/// `node_name`, so every place that takes one applies this rule.
pub fn check_node_name(name: &str) -> Result<(), String> {
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() <= MAX_NODE_NAME && name.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(format!(
            "node name {name:?} must be a DNS name: lower-case letters, digits, '-' and '.', labels of 1 to 63 not starting or ending with '-', at most {MAX_NODE_NAME} in all"
        ))
    }
}

/// Optional features a node offers, as bits; unknown bits are kept and ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Capabilities(pub u64);

impl Capabilities {
    pub const DATAGRAM: Capabilities = Capabilities(1 << 0);
    pub const STREAM: Capabilities = Capabilities(1 << 1);

    pub fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn union(self, other: Capabilities) -> Capabilities {
        Capabilities(self.0 | other.0)
    }
}

/// The first message on every control stream, sent by both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub min_version: u16,
    pub max_version: u16,
    pub node_name: String,
    pub capabilities: Capabilities,
}

impl Hello {
    /// The Hello this build sends.
    pub fn current(node_name: impl Into<String>, capabilities: Capabilities) -> Hello {
        Hello {
            min_version: MIN_PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            node_name: node_name.into(),
            capabilities,
        }
    }

    /// The version both sides speak: the highest in the overlap of the two ranges, or
    /// `None`, in which case the reader answers `Error(UNSUPPORTED_VERSION)` and closes.
    pub fn negotiate(&self, theirs: &Hello) -> Option<u16> {
        let high = self.max_version.min(theirs.max_version);
        let low = self.min_version.max(theirs.min_version);
        (low <= high).then_some(high)
    }
}

/// How a wire's frames cross between nodes: in QUIC DATAGRAM frames or on a QUIC stream
/// through the fast path, or in a kernel VXLAN device at each end, which the fast path
/// never sees (the peers' control messages still say which, so both ends agree). Encoded
/// as its index: a peer that predates `Vxlan` reads an AddWire of a VXLAN wire as
/// malformed, and answers so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Carrier {
    Datagram,
    Stream,
    Vxlan,
}

impl Carrier {
    /// Whether the fast path carries the wire's frames (over QUIC).
    pub fn is_quic(self) -> bool {
        matches!(self, Carrier::Datagram | Carrier::Stream)
    }
}

/// Names one wire: its topology namespace and its link UID inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WireKey {
    pub namespace: String,
    pub link_uid: u64,
}

impl WireKey {
    /// Wire `link_uid` of the topologies in `namespace`. The daemon makes its keys from a
    /// topology link (`LinkSpec::wire`) or a wire record (`WireRecord::wire`); this is
    /// for a key read from elsewhere (a peer's message, a test).
    pub fn new(namespace: impl Into<String>, link_uid: u64) -> WireKey {
        WireKey {
            namespace: namespace.into(),
            link_uid,
        }
    }

    /// The id the wire's frames carry between nodes, and the fast path's key for its link.
    pub fn id(&self) -> crate::WireId {
        crate::WireId::new(&self.namespace, self.link_uid)
    }
}

/// A wire as the sending node sees it: its own end (`sender_*`) and the end it expects
/// on the receiving node (`receiver_*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSpec {
    pub key: WireKey,
    pub sender_pod: String,
    pub sender_intf: String,
    pub receiver_pod: String,
    pub receiver_intf: String,
    pub carrier: Carrier,
}

/// Error codes; unknown codes are carried through unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    pub const UNSUPPORTED_VERSION: ErrorCode = ErrorCode(1);
    pub const UNKNOWN_TYPE: ErrorCode = ErrorCode(2);
    pub const MALFORMED: ErrorCode = ErrorCode(3);
    pub const UNKNOWN_WIRE: ErrorCode = ErrorCode(4);
    pub const CONFLICT: ErrorCode = ErrorCode(5);
    pub const INTERNAL: ErrorCode = ErrorCode(6);
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// A Sync, or one part of it: every wire the sender believes it shares with the
/// receiver is in one of the parts, and only the last part has `more` false. (Version 1
/// sends one part and no `more`, which reads as false.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncBody {
    pub wires: Vec<WireSpec>,
    pub more: bool,
}

impl SyncBody {
    /// `wires` in parts of at most `MAX_SYNC_PART` bytes of specs each (a single spec
    /// larger than that, impossible with names Kubernetes allows, is a part alone). At
    /// least one part, so that an empty Sync still says "nothing".
    pub fn parts(wires: Vec<WireSpec>) -> Vec<SyncBody> {
        let mut parts = Vec::new();
        let mut current = Vec::new();
        let mut bytes = 0;
        for spec in wires {
            let size = postcard::experimental::serialized_size(&spec).unwrap_or(usize::MAX);
            if !current.is_empty() && bytes + size > MAX_SYNC_PART {
                parts.push(SyncBody {
                    wires: std::mem::take(&mut current),
                    more: true,
                });
                bytes = 0;
            }
            bytes = bytes.saturating_add(size);
            current.push(spec);
        }
        parts.push(SyncBody {
            wires: current,
            more: false,
        });
        parts
    }
}

/// What a control message says. Ack and Error answer the request whose id they carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlBody {
    Hello(Hello),
    AddWire(WireSpec),
    DelWire(WireKey),
    Sync(SyncBody),
    Ack,
    Error(ErrorBody),
}

impl ControlBody {
    pub(crate) fn type_code(&self) -> u8 {
        match self {
            ControlBody::Hello(_) => 1,
            ControlBody::AddWire(_) => 2,
            ControlBody::DelWire(_) => 3,
            ControlBody::Sync(_) => 4,
            ControlBody::Ack => 5,
            ControlBody::Error(_) => 6,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlMessage {
    pub request_id: u64,
    pub body: ControlBody,
}

impl ControlMessage {
    /// Appends this message as one length-prefixed record.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let result = append_record(out, |out| {
            out.push(self.body.type_code());
            out.extend_from_slice(&self.request_id.to_be_bytes());
            match &self.body {
                ControlBody::Hello(m) => postcard::to_io(m, &mut *out).map(drop),
                ControlBody::AddWire(m) => postcard::to_io(m, &mut *out).map(drop),
                ControlBody::DelWire(m) => postcard::to_io(m, &mut *out).map(drop),
                ControlBody::Sync(m) => postcard::to_io(m, &mut *out).map(drop),
                ControlBody::Ack => Ok(()),
                ControlBody::Error(m) => postcard::to_io(m, &mut *out).map(drop),
            }
        });
        // Serializing these plain structs into a Vec has no failure path in postcard.
        result.expect("postcard encoding into a Vec cannot fail");
    }

    /// The request id of a record body, whether or not the rest of it decodes (0 when
    /// the body is too short to hold one): what an Error answering it carries.
    pub fn request_id_of(body: &[u8]) -> u64 {
        body.get(1..MESSAGE_HEADER_LEN)
            .map_or(0, |id| u64::from_be_bytes(id.try_into().expect("8 bytes")))
    }

    /// Decodes one record body (without its length prefix). Bytes after the fields this
    /// version knows are ignored: newer versions may append fields to a message.
    pub fn decode(body: &[u8]) -> Result<ControlMessage, DecodeError> {
        let header = body
            .get(..MESSAGE_HEADER_LEN)
            .ok_or(DecodeError::Truncated)?;
        let code = header[0];
        let mut id = [0u8; 8];
        id.copy_from_slice(&header[1..]);
        let request_id = u64::from_be_bytes(id);
        let payload = &body[MESSAGE_HEADER_LEN..];
        let body = match code {
            1 => ControlBody::Hello(fields(payload)?),
            2 => ControlBody::AddWire(fields(payload)?),
            3 => ControlBody::DelWire(fields(payload)?),
            4 => ControlBody::Sync(sync_fields(payload)?),
            5 => ControlBody::Ack,
            6 => ControlBody::Error(fields(payload)?),
            code => return Err(DecodeError::UnknownControlType { code, request_id }),
        };
        Ok(ControlMessage { request_id, body })
    }
}

fn fields<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, DecodeError> {
    postcard::take_from_bytes(payload)
        .map(|(value, _newer_fields)| value)
        .map_err(|e| DecodeError::Malformed(e.to_string()))
}

/// A Sync's fields: `wires`, then `more`, which version 1 does not send.
fn sync_fields(payload: &[u8]) -> Result<SyncBody, DecodeError> {
    let (wires, rest) = postcard::take_from_bytes::<Vec<WireSpec>>(payload)
        .map_err(|e| DecodeError::Malformed(e.to_string()))?;
    let more = match rest.first() {
        None | Some(0) => false,
        Some(1) => true,
        Some(other) => return Err(DecodeError::Malformed(format!("Sync.more is {other}"))),
    };
    Ok(SyncBody { wires, more })
}

/// Reads the next control record from a stream's receive buffer.
///
/// `Ok(None)`: not all of it has arrived. `Ok(Some((message, used)))`: consume `used`
/// bytes whatever `message` is; an `Err` there is a bad message the reader answers with
/// an Error and then carries on. An outer `Err` is broken framing: close the stream.
#[allow(clippy::type_complexity)]
pub fn next_control_record(
    buf: &[u8],
) -> Result<Option<(Result<ControlMessage, DecodeError>, usize)>, DecodeError> {
    Ok(split_record(buf, MAX_CONTROL_BODY)?
        .map(|(body, used)| (ControlMessage::decode(body), used)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(uid: u64) -> WireSpec {
        WireSpec {
            key: WireKey {
                namespace: "lab".into(),
                link_uid: uid,
            },
            sender_pod: "r1".into(),
            sender_intf: "eth1".into(),
            receiver_pod: "r2".into(),
            receiver_intf: "eth2".into(),
            carrier: Carrier::Datagram,
        }
    }

    #[test]
    fn messages_round_trip_back_to_back() {
        let msgs = [
            ControlBody::Hello(Hello::current("node-a", Capabilities::DATAGRAM)),
            ControlBody::AddWire(spec(7)),
            ControlBody::DelWire(spec(7).key),
            ControlBody::Sync(SyncBody {
                wires: vec![spec(1), spec(2)],
                more: true,
            }),
            ControlBody::Ack,
            ControlBody::Error(ErrorBody {
                code: ErrorCode::CONFLICT,
                message: "taken".into(),
            }),
        ];
        let mut wire = Vec::new();
        for (i, body) in msgs.iter().enumerate() {
            ControlMessage {
                request_id: i as u64,
                body: body.clone(),
            }
            .encode(&mut wire);
        }
        let mut rest = &wire[..];
        for (i, body) in msgs.iter().enumerate() {
            let (msg, used) = next_control_record(rest).unwrap().unwrap();
            assert_eq!(
                msg.unwrap(),
                ControlMessage {
                    request_id: i as u64,
                    body: body.clone()
                }
            );
            rest = &rest[used..];
        }
        assert!(rest.is_empty());
    }

    #[test]
    fn unknown_type_is_skipped_with_its_request_id() {
        let mut wire = Vec::new();
        append_record::<()>(&mut wire, |b| {
            b.push(200);
            b.extend_from_slice(&77u64.to_be_bytes());
            b.extend_from_slice(b"future payload");
            Ok(())
        })
        .unwrap();
        ControlMessage {
            request_id: 78,
            body: ControlBody::Ack,
        }
        .encode(&mut wire);
        let (first, used) = next_control_record(&wire).unwrap().unwrap();
        assert_eq!(
            first,
            Err(DecodeError::UnknownControlType {
                code: 200,
                request_id: 77
            })
        );
        let (second, _) = next_control_record(&wire[used..]).unwrap().unwrap();
        assert_eq!(second.unwrap().request_id, 78);
    }

    #[test]
    fn appended_fields_from_a_newer_peer_are_ignored() {
        let msg = ControlMessage {
            request_id: 1,
            body: ControlBody::DelWire(spec(3).key),
        };
        let mut wire = Vec::new();
        msg.encode(&mut wire);
        let mut body = wire[4..].to_vec();
        body.extend_from_slice(&[1, 2, 3]);
        assert_eq!(ControlMessage::decode(&body).unwrap(), msg);
    }

    #[test]
    fn a_sync_too_large_for_one_record_goes_in_parts_that_each_fit() {
        // 7000 wires with the longest names Kubernetes allows: about 4.3 MB in one Sync.
        let long = |c: char| c.to_string().repeat(253);
        let wires: Vec<WireSpec> = (0..7000)
            .map(|uid| WireSpec {
                key: WireKey {
                    namespace: "n".repeat(63),
                    link_uid: uid,
                },
                sender_pod: long('a'),
                sender_intf: "e".repeat(15),
                receiver_pod: long('b'),
                receiver_intf: "f".repeat(15),
                carrier: Carrier::Stream,
            })
            .collect();
        let parts = SyncBody::parts(wires.clone());
        assert!(parts.len() > 1);
        let mut joined = Vec::new();
        for (i, part) in parts.iter().enumerate() {
            assert_eq!(part.more, i + 1 < parts.len());
            let mut record = Vec::new();
            ControlMessage {
                request_id: 0,
                body: ControlBody::Sync(part.clone()),
            }
            .encode(&mut record);
            let (decoded, _) = next_control_record(&record).unwrap().unwrap();
            match decoded.unwrap().body {
                ControlBody::Sync(body) => joined.extend(body.wires),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(joined, wires);
        assert_eq!(SyncBody::parts(Vec::new()).len(), 1);
    }

    #[test]
    fn a_version_1_sync_reads_as_complete() {
        let mut record = Vec::new();
        append_record::<postcard::Error>(&mut record, |b| {
            b.push(4);
            b.extend_from_slice(&9u64.to_be_bytes());
            postcard::to_io(&vec![spec(1)], &mut *b).map(drop)
        })
        .unwrap();
        let (decoded, _) = next_control_record(&record).unwrap().unwrap();
        assert_eq!(
            decoded.unwrap().body,
            ControlBody::Sync(SyncBody {
                wires: vec![spec(1)],
                more: false
            })
        );
    }

    #[test]
    fn node_names_are_dns_names_and_nothing_else() {
        for good in ["n1", "node-a", "worker-1.lab.example", "a", &"a".repeat(63)] {
            assert!(check_node_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "*",
            "*.lab",
            "a/b",
            "../x",
            "N1",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a b",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(check_node_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn version_ranges_negotiate_to_the_highest_shared() {
        let ours = Hello {
            min_version: 1,
            max_version: 3,
            node_name: "a".into(),
            capabilities: Capabilities::default(),
        };
        let newer = Hello {
            min_version: 2,
            max_version: 5,
            ..ours.clone()
        };
        let too_new = Hello {
            min_version: 4,
            max_version: 5,
            ..ours.clone()
        };
        assert_eq!(ours.negotiate(&newer), Some(3));
        assert_eq!(ours.negotiate(&too_new), None);
    }
}
