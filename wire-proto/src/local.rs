//! The local API between the CNI plugin and the node daemon, on a Unix stream socket.
//!
//! A record is the shared length prefix and a JSON object
//! `{"version": 1, "id": N, "body": {"type": "...", ...}}`. JSON because what crosses here
//! is mostly CNI's own JSON (the network configuration with its prevResult), which the
//! daemon must read with unknown fields intact; the calls are few, so speed does not matter.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::framing::{append_record, split_record};
use crate::DecodeError;

pub(crate) const LOCAL_API_VERSION: u32 = 1;

/// CNI error codes: the spec's (1 to 99), then xwire's own from 100 up. `cni/README.md`
/// says what each of xwire's means and what to do about it.
pub mod codes {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    /// An interface the topology names already exists in the pod's namespace.
    pub const INTERFACE_EXISTS: u32 = 100;
    /// Creating or configuring an interface failed.
    pub const INTERFACE_FAILED: u32 = 101;
    /// The fast path refused a port or a link.
    pub const FASTPATH_FAILED: u32 = 102;
    /// The wire store could not be read or written.
    pub const STORE_FAILED: u32 = 103;
    /// The pod is already attached, under another container, in a namespace that exists.
    pub const POD_ALREADY_ATTACHED: u32 = 104;
    /// CHECK found the pod's interfaces or wires not as the topology says.
    pub const CHECK_FAILED: u32 = 105;
    /// A topology request was refused (a malformed or inconsistent object).
    pub const TOPOLOGY_INVALID: u32 = 106;
}
/// The largest request body a daemon accepts (a network configuration with a large
/// prevResult; a piece of a Topology list, `TopologyApply::in_pieces`).
pub const MAX_LOCAL_BODY: usize = 1 << 20;
/// The largest answer a client reads: a daemon's answers grow with the node (the wire
/// records of a 10,000-pod lab, a namespace's Topology objects), and come from the
/// daemon the client chose to ask; the bound only keeps a wrong peer from growing the
/// client without end.
pub(crate) const MAX_LOCAL_RESPONSE: usize = 256 << 20;

/// A pod, as Kubernetes names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// What ADD, DEL and CHECK carry: the CNI environment and the configuration from stdin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CniCall {
    /// The cniVersion of the configuration, which is also the version to answer in.
    pub cni_version: String,
    pub container_id: String,
    /// `CNI_NETNS`; empty when the runtime sent none (allowed for DEL).
    pub netns: String,
    pub ifname: String,
    pub pod: PodRef,
    /// `CNI_ARGS` as key/value pairs, in the order given.
    pub args: Vec<(String, String)>,
    /// The network configuration as received, prevResult and runtimeConfig included.
    pub config: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusCall {
    pub cni_version: String,
    pub config: Value,
}

/// One attachment the runtime still holds (`cni.dev/valid-attachments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub container_id: String,
    pub ifname: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GcCall {
    pub cni_version: String,
    pub config: Value,
    pub valid_attachments: Vec<Attachment>,
}

/// Names Topology objects: all of them, one namespace's, or one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopologyApply {
    /// Topology objects in the Kubernetes shape (apiVersion, kind, metadata, spec).
    pub objects: Vec<Value>,
}

/// The envelope's and the request's own bytes around the objects of a `TopologyApply`,
/// with room to spare.
const APPLY_OVERHEAD: usize = 4096;

impl TopologyApply {
    /// `objects` in as many requests as it takes for each to fit in one call
    /// (`MAX_LOCAL_BODY`), in order. A daemon stores each object as it comes and checks
    /// it against those it has, so a lab of any size is applied piece by piece. An
    /// object too large for a call on its own is a request of its own, which the client
    /// refuses with its size (`xwire-api-client`).
    pub fn in_pieces(objects: Vec<Value>) -> Vec<TopologyApply> {
        let room = MAX_LOCAL_BODY - APPLY_OVERHEAD;
        let mut pieces = Vec::new();
        let mut piece = Vec::new();
        let mut bytes = 0;
        for object in objects {
            // One comma between objects; an object's JSON cannot fail to be written.
            let size = serde_json::to_vec(&object).map_or(0, |json| json.len()) + 1;
            if !piece.is_empty() && bytes + size > room {
                pieces.push(TopologyApply {
                    objects: std::mem::take(&mut piece),
                });
                bytes = 0;
            }
            piece.push(object);
            bytes += size;
        }
        if !piece.is_empty() || pieces.is_empty() {
            pieces.push(TopologyApply { objects: piece });
        }
        pieces
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Add(CniCall),
    Del(CniCall),
    Check(CniCall),
    Status(StatusCall),
    Gc(GcCall),
    /// `xwirectl topology apply`: stores the objects; links of running pods follow.
    TopologyApply(TopologyApply),
    TopologyGet(TopologyQuery),
    /// Removes the named objects (a name is required); their pods' wires go.
    TopologyDelete(TopologyQuery),
    /// The node's attachments and wire records, for `xwirectl wires` and tests.
    State,
    /// `xwirectl reconcile`: converge the node on its store now, and say what changed.
    Reconcile,
    /// The fast path's counters: per wire end, per peer node, and the worker's load
    /// (`xwirectl wires`, `lab status`, the metrics endpoint).
    Counters,
    /// `xwirectl capture`: the answer is `Capturing`, then the connection carries a
    /// pcapng stream until the caller shuts its side down (the daemon then ends the
    /// file with its statistics) or goes away.
    Capture(CaptureCall),
}

impl Request {
    /// The request's `type`, as it travels.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Add(_) => "add",
            Request::Del(_) => "del",
            Request::Check(_) => "check",
            Request::Status(_) => "status",
            Request::Gc(_) => "gc",
            Request::TopologyApply(_) => "topology_apply",
            Request::TopologyGet(_) => "topology_get",
            Request::TopologyDelete(_) => "topology_delete",
            Request::State => "state",
            Request::Reconcile => "reconcile",
            Request::Counters => "counters",
            Request::Capture(_) => "capture",
        }
    }
}

/// A capture of one wire end's link, named by its pod and its link uid or interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureCall {
    pub namespace: String,
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_uid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ifname: Option<String>,
    /// What the pod sends on the link, what it receives, or both.
    pub direction: CaptureDirection,
    /// The most bytes kept of each frame (0: whole frames).
    #[serde(default)]
    pub snaplen: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureDirection {
    Egress,
    Ingress,
    Both,
}

/// What `Request::Counters` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeCounters {
    pub node: String,
    /// One entry per wire end of this node that the fast path carries (a same-node wire
    /// that is a plain veth pair has none: the switch never sees its frames).
    pub links: Vec<LinkEndCounters>,
    pub peers: Vec<PeerCounters>,
    /// The peer transport's totals by name (empty when the node has no peers).
    #[serde(default)]
    pub transport: BTreeMap<String, u64>,
    /// Seconds the workers spent in passes that moved frames, and seconds they have
    /// run, summed over the workers.
    #[serde(default)]
    pub worker_busy_seconds: f64,
    #[serde(default)]
    pub worker_running_seconds: f64,
    /// Data-plane workers (one per data core).
    #[serde(default)]
    pub workers: usize,
    /// The longest any worker was away from its ports (from one pass's start to the
    /// next's, less the time it slept with nothing to do), and how many times the
    /// workers came back after more than 1, 4 and 16 ms: a port's fill ring must hold
    /// what arrives meanwhile, or the kernel drops frames.
    #[serde(default)]
    pub worker_longest_away_seconds: f64,
    #[serde(default)]
    pub worker_away_over_1ms: u64,
    #[serde(default)]
    pub worker_away_over_4ms: u64,
    #[serde(default)]
    pub worker_away_over_16ms: u64,
    /// The nice value each worker's thread runs at, by worker index: the daemon's
    /// `worker_nice` (-20 by default) unless the kernel refused it (no `CAP_SYS_NICE`),
    /// when the worker keeps the daemon's own.
    #[serde(default)]
    pub worker_nice: Vec<i8>,
}

/// The counters of one wire end, seen from its pod: `egress` is what the pod sent into
/// the wire, `ingress` what the wire delivered to it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEndCounters {
    pub namespace: String,
    pub pod: String,
    pub interface: String,
    pub uid: u64,
    pub peer_pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_node: Option<String>,
    /// How the switch carries it: `remote`, `steered` or `switched`.
    pub path: String,
    pub egress: DirectionCounters,
    pub ingress: DirectionCounters,
    /// What the kernel dropped, by reason, at the port that takes this pod's frames,
    /// before the switch saw them.
    #[serde(default)]
    pub kernel_drops: BTreeMap<String, u64>,
    /// The UMEM frames that port has now (it is resized by its traffic); none for a
    /// port with no UMEM of its own to report (AF_PACKET, steered, being resized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umem_frames: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectionCounters {
    pub frames: u64,
    pub bytes: u64,
    /// Frames the switch dropped, by reason (every reason is listed, zeros included).
    pub drops: BTreeMap<String, u64>,
}

/// One peer node's QUIC connection (zeros while it is down).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerCounters {
    pub node: String,
    /// The worker whose connection this is: each worker has its own to each peer node
    /// (worker 0's also carries the control protocol).
    #[serde(default)]
    pub worker: usize,
    pub up: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u64>,
    pub udp_datagrams_sent: u64,
    pub udp_bytes_sent: u64,
    pub udp_datagrams_received: u64,
    pub udp_bytes_received: u64,
    pub lost_packets: u64,
    pub datagram_frames_sent: u64,
    pub datagram_frames_received: u64,
    /// Times QUIC told the connection's congestion controller of loss.
    #[serde(default)]
    pub congestion_events: u64,
    /// The connection's window in bytes while sustained loss holds it capped; absent while
    /// it is open (frames leave as they come).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_cap: Option<u64>,
}

/// What `Request::State` answers: the store's records, as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    pub node: String,
    pub attachments: Vec<Value>,
    pub wires: Vec<Value>,
    /// Claims by peer nodes to hold a wire's far end that this node refused (the claim
    /// came from a node that does not run the far end's pod).
    #[serde(default)]
    pub refused_claims: u64,
    /// Claims by peer nodes that the node's own thread judged: only those its peer desk
    /// found true by its view (a claim the desk refuses never reaches the thread that
    /// answers the local API).
    #[serde(default)]
    pub claims_judged_by_node: u64,
    /// Requests the node's store made to its backend's server (the Kubernetes API
    /// server; the embedded store makes none), watches aside.
    #[serde(default)]
    pub store_requests: u64,
    /// Objects of the node's records that its backend's server does not yet hold as the
    /// node does (the Kubernetes store writes its GWireKObj objects behind the node's
    /// journal); always zero for the embedded store.
    #[serde(default)]
    pub store_unwritten: u64,
    /// The node's pool, role, gateway in use and tunnels, where there are node pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<Value>,
}

/// An interface the daemon made, in the CNI result's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniInterface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for an interface inside the pod; absent for a node-side one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// An address the daemon set, in the CNI result's shape. `interface` indexes
/// `AddResult::interfaces`; the plugin shifts it past prevResult's interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniIp {
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    pub interface: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddResult {
    pub interfaces: Vec<CniInterface>,
    pub ips: Vec<CniIp>,
}

/// A CNI error for the plugin to print: `code` uses the CNI spec's numbers (and xwire's
/// own from 100 up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    #[serde(default)]
    pub details: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Response {
    /// ADD made these interfaces for the pod.
    Added(AddResult),
    /// The pod is in no topology: the plugin passes prevResult through untouched.
    NotManaged,
    /// DEL, CHECK, STATUS or GC succeeded.
    Ok,
    Error(CniError),
    /// The objects a topology request selected (or stored).
    Topologies {
        objects: Vec<Value>,
    },
    State(NodeState),
    /// What a reconcile pass changed, one line per change (empty: nothing to do).
    Reconciled {
        changes: Vec<String>,
        failures: Vec<String>,
    },
    /// A capture started: the pcapng stream follows. `interfaces` names the file's two
    /// interfaces (the sending endpoint of each direction, `pod:interface`).
    Capturing {
        interfaces: Vec<String>,
    },
    Counters(NodeCounters),
}

/// The `type` values of `Request`, for telling an unknown type from a malformed one.
const REQUEST_TYPES: [&str; 12] = [
    "add",
    "del",
    "check",
    "status",
    "gc",
    "topology_apply",
    "topology_get",
    "topology_delete",
    "state",
    "reconcile",
    "capture",
    "counters",
];
const RESPONSE_TYPES: [&str; 9] = [
    "added",
    "not_managed",
    "ok",
    "error",
    "topologies",
    "state",
    "reconciled",
    "capturing",
    "counters",
];

#[derive(Serialize)]
struct EnvelopeOut<'a, T> {
    version: u32,
    id: u64,
    body: &'a T,
}

/// Appends one length-prefixed message with this build's version.
pub fn encode<T: Serialize>(id: u64, body: &T, out: &mut Vec<u8>) {
    let envelope = EnvelopeOut {
        version: LOCAL_API_VERSION,
        id,
        body,
    };
    // Request and Response hold only strings, numbers and JSON values: nothing that
    // serde_json can fail to write into a Vec.
    append_record(out, |out| serde_json::to_writer(&mut *out, &envelope))
        .expect("JSON encoding of a local API message cannot fail");
}

/// Decodes a request body (without its length prefix); the id comes back for the answer.
pub fn decode_request(body: &[u8]) -> Result<(u64, Request), DecodeError> {
    decode(body, &REQUEST_TYPES)
}

pub fn decode_response(body: &[u8]) -> Result<(u64, Response), DecodeError> {
    decode(body, &RESPONSE_TYPES)
}

/// Reads the next request's record body from a receive buffer (see
/// `framing::split_record`).
pub fn next_record(buf: &[u8]) -> Result<Option<(&[u8], usize)>, DecodeError> {
    split_record(buf, MAX_LOCAL_BODY)
}

/// Reads the next answer's record body from a receive buffer, up to
/// `MAX_LOCAL_RESPONSE`.
pub fn next_response_record(buf: &[u8]) -> Result<Option<(&[u8], usize)>, DecodeError> {
    split_record(buf, MAX_LOCAL_RESPONSE)
}

fn decode<T: for<'de> Deserialize<'de>>(
    body: &[u8],
    known_types: &[&str],
) -> Result<(u64, T), DecodeError> {
    let malformed = |what: String| DecodeError::Malformed(what);
    let mut envelope: Value = serde_json::from_slice(body).map_err(|e| malformed(e.to_string()))?;
    let version = envelope
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("no numeric \"version\"".into()))?;
    if version != u64::from(LOCAL_API_VERSION) {
        return Err(DecodeError::UnsupportedVersion(
            u32::try_from(version).unwrap_or(u32::MAX),
        ));
    }
    let id = envelope
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| malformed("no numeric \"id\"".into()))?;
    let body = envelope
        .get_mut("body")
        .map(Value::take)
        .ok_or_else(|| malformed("no \"body\"".into()))?;
    let kind = body
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no string \"body.type\"".into()))?;
    if !known_types.contains(&kind) {
        return Err(DecodeError::UnknownLocalType {
            name: kind.to_owned(),
            id,
        });
    }
    let message = serde_json::from_value(body).map_err(|e| malformed(e.to_string()))?;
    Ok((id, message))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_topology_list_over_one_calls_cap_goes_in_pieces_that_each_fit() {
        let object = |i: usize| {
            serde_json::json!({
                "apiVersion": "networkop.co.uk/v1beta1", "kind": "Topology",
                "metadata": {"name": format!("r{i}"), "namespace": "big"},
                "spec": {"links": [{"uid": i, "peer_pod": "x".repeat(300)}]},
            })
        };
        let objects: Vec<Value> = (0..10_000).map(object).collect();
        let pieces = TopologyApply::in_pieces(objects.clone());
        assert!(pieces.len() > 1, "{} pieces", pieces.len());
        for piece in &pieces {
            let mut out = Vec::new();
            encode(1, &Request::TopologyApply(piece.clone()), &mut out);
            assert!(next_record(&out).is_ok(), "a piece of {} bytes", out.len());
        }
        let rejoined: Vec<Value> = pieces.into_iter().flat_map(|p| p.objects).collect();
        assert_eq!(rejoined, objects, "every object, once, in order");
        // An empty list is one (empty) request; a small one is one request.
        assert_eq!(TopologyApply::in_pieces(Vec::new()).len(), 1);
        assert_eq!(TopologyApply::in_pieces(vec![object(1)]).len(), 1);
    }
    use super::*;
    use serde_json::json;

    fn call() -> CniCall {
        CniCall {
            cni_version: "1.1.0".into(),
            container_id: "abc".into(),
            netns: "/run/netns/x".into(),
            ifname: "eth0".into(),
            pod: PodRef {
                namespace: "lab".into(),
                name: "r1".into(),
            },
            args: vec![("K8S_POD_NAME".into(), "r1".into())],
            config: json!({"cniVersion": "1.1.0", "name": "net", "type": "xwire", "prevResult": {"interfaces": []}}),
        }
    }

    #[test]
    fn request_and_response_round_trip() {
        let mut wire = Vec::new();
        encode(9, &Request::Add(call()), &mut wire);
        let (body, used) = next_record(&wire).unwrap().unwrap();
        assert_eq!(used, wire.len());
        assert_eq!(decode_request(body).unwrap(), (9, Request::Add(call())));

        let resp = Response::Error(CniError {
            code: 11,
            msg: "daemon busy".into(),
            details: String::new(),
        });
        let mut wire = Vec::new();
        encode(9, &resp, &mut wire);
        assert_eq!(decode_response(&wire[4..]).unwrap(), (9, resp));
    }

    #[test]
    fn every_variant_name_is_listed_as_known() {
        let requests = [
            Request::Add(call()),
            Request::Status(StatusCall {
                cni_version: "1.1.0".into(),
                config: json!({}),
            }),
            Request::Gc(GcCall {
                cni_version: "1.1.0".into(),
                config: json!({}),
                valid_attachments: vec![],
            }),
            Request::TopologyApply(TopologyApply { objects: vec![] }),
            Request::TopologyGet(TopologyQuery::default()),
            Request::TopologyDelete(TopologyQuery::default()),
            Request::State,
            Request::Reconcile,
            Request::Counters,
            Request::Capture(CaptureCall {
                namespace: "lab".into(),
                pod: "r1".into(),
                link_uid: Some(1),
                ifname: None,
                direction: CaptureDirection::Both,
                snaplen: 0,
            }),
        ];
        for r in requests {
            let v = serde_json::to_value(&r).unwrap();
            assert!(REQUEST_TYPES.contains(&v["type"].as_str().unwrap()));
            assert_eq!(v["type"], r.name());
        }
        let responses = [
            Response::NotManaged,
            Response::Ok,
            Response::Topologies { objects: vec![] },
            Response::State(NodeState::default()),
            Response::Reconciled {
                changes: vec![],
                failures: vec![],
            },
            Response::Capturing { interfaces: vec![] },
            Response::Counters(NodeCounters::default()),
        ];
        for r in responses {
            let v = serde_json::to_value(&r).unwrap();
            assert!(RESPONSE_TYPES.contains(&v["type"].as_str().unwrap()));
        }
    }

    #[test]
    fn newer_version_and_unknown_type_are_told_apart() {
        let newer = json!({"version": 2, "id": 1, "body": {"type": "add"}}).to_string();
        assert_eq!(
            decode_request(newer.as_bytes()),
            Err(DecodeError::UnsupportedVersion(2))
        );
        let unknown = json!({"version": 1, "id": 4, "body": {"type": "teleport"}}).to_string();
        assert_eq!(
            decode_request(unknown.as_bytes()),
            Err(DecodeError::UnknownLocalType {
                name: "teleport".into(),
                id: 4
            })
        );
        let missing = json!({"version": 1, "id": 4, "body": {"type": "add"}}).to_string();
        assert!(matches!(
            decode_request(missing.as_bytes()),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn unknown_fields_from_a_newer_plugin_are_ignored() {
        let mut v = json!({"version": 1, "id": 3, "body": serde_json::to_value(Request::Del(call())).unwrap()});
        v["body"]["future_field"] = json!(true);
        v["later"] = json!("x");
        let (id, req) = decode_request(v.to_string().as_bytes()).unwrap();
        assert_eq!((id, req), (3, Request::Del(call())));
    }
}
