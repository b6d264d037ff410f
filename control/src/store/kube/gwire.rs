//! meshnet's GWireKObj (`gwirekobjs.networkop.co.uk/v1beta1`) as the wire store: one
//! object per node per topology namespace, named after the node, and more where one would
//! be too large for etcd (`parts`). `spec.uids` lists the
//! node's links in that namespace and `status.grpcWireItems` holds one item per wire end
//! with meshnet's fields. meshnet keeps only wires that cross nodes there; xwire keeps
//! every end, with five fields of its own in each item (`peer_pod`, `peer_node`,
//! `peer_node_address`, `state`, `container_id`: what reconciliation needs and GWire lacks) and its CNI
//! attachments in `status.xwireAttachments`. meshnet's readers ignore what they do not
//! know, and the CRD in deploy/ declares the extra fields as optional.
//! Conversions only; the API calls are in `mod.rs`.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use xwire_proto::WireId;

use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};

pub(crate) const GROUP: &str = "networkop.co.uk";
pub const VERSION: &str = "v1beta1";
pub const KIND: &str = "GWireKObj";
pub(crate) const PLURAL: &str = "gwirekobjs";
/// The label every GWireKObj xwire writes carries: the node it belongs to.
pub(crate) const NODE_LABEL: &str = "xwire.dev/node";

/// What the names of a node's further objects in a namespace add to the node's name,
/// before the part's number (`part_name`).
const PART_SUFFIX: &str = ".xwire-part-";

/// The most a part's status should hold, as JSON. etcd refuses a value over 1.5 MiB by
/// default (`--max-request-bytes`): one object for 1,500 pods on one node held about
/// 2 MiB and was refused ("etcdserver: request is too large"). Pods are spread over the
/// parts by a hash of their name, so a part may hold more than this; the limit is three
/// times it.
const PART_BYTES: usize = 512 * 1024;

/// The name of a node's object `part` in a namespace: the first is named after the node,
/// as meshnet names it; the others after it, with `PART_SUFFIX` and the part's number.
pub fn part_name(node: &str, part: usize) -> String {
    match part {
        0 => node.to_owned(),
        n => format!("{node}{PART_SUFFIX}{n}"),
    }
}

/// The records split into the objects that hold them, by name: one object (named after
/// the node) unless its status would hold more than `PART_BYTES`, else as many as that
/// takes. A pod's ends and attachment stay in one object.
pub fn parts(
    node: &str,
    namespace: &str,
    records: &NamespaceRecords,
) -> Vec<(String, NamespaceRecords)> {
    let bytes = serde_json::to_vec(&status(node, namespace, records)).map_or(0, |json| json.len());
    let count = bytes.div_ceil(PART_BYTES).max(1);
    if count == 1 {
        return vec![(part_name(node, 0), records.clone())];
    }
    let mut parts = vec![NamespaceRecords::default(); count];
    let part_of = |pod: &str| (stable_hash(pod) % count as u64) as usize;
    for (key, wire) in &records.wires {
        parts[part_of(&wire.local_pod_name)]
            .wires
            .insert(key.clone(), wire.clone());
    }
    for (key, attachment) in &records.attachments {
        parts[part_of(&attachment.pod.name)]
            .attachments
            .insert(key.clone(), attachment.clone());
    }
    parts
        .into_iter()
        .enumerate()
        .map(|(n, part)| (part_name(node, n), part))
        .collect()
}

/// FNV-1a of `text`. By hand, as five lines: a pod should stay in its part from one
/// release to the next, and the standard library's hasher promises no such thing.
fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The records of one node in one topology namespace.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NamespaceRecords {
    pub wires: BTreeMap<EndKey, WireRecord>,
    pub attachments: BTreeMap<AttachmentKey, AttachmentRecord>,
}

impl NamespaceRecords {
    pub fn is_empty(&self) -> bool {
        self.wires.is_empty() && self.attachments.is_empty()
    }

    pub fn uids(&self) -> Vec<u64> {
        let mut uids: Vec<u64> = self.wires.values().map(|w| w.link_uid).collect();
        uids.sort_unstable();
        uids.dedup();
        uids
    }
}

/// The object without its status: what creates it and owns its `spec`. `node_uid` is
/// the Node object's uid, when there is one: the object is then owned by the Node, and
/// the cluster's garbage collector deletes it with the node.
pub fn object(
    name: &str,
    node: &str,
    node_uid: Option<&str>,
    namespace: &str,
    records: &NamespaceRecords,
) -> Value {
    let mut object = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {NODE_LABEL: node}},
        "spec": {"uids": records.uids()},
    });
    if let Some(uid) = node_uid {
        object["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
        }]);
    }
    object
}

/// The status of object `name` (for the status subresource).
pub fn status(name: &str, namespace: &str, records: &NamespaceRecords) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "grpcWireItems": records.wires.values().map(item).collect::<Vec<_>>(),
            "xwireAttachments": records.attachments.values().map(|a| serde_json::to_value(a).expect("serializes")).collect::<Vec<_>>(),
            "xwireSummary": summary(records),
        },
    })
}

/// What `kubectl get gwirekobjs` shows (the CRD's printer columns, whose JSONPath can
/// neither count nor list more than an array's first item): how many ends, how many of
/// them wait for their peer, and the peer nodes.
fn summary(records: &NamespaceRecords) -> Value {
    let pending = (records.wires.values())
        .filter(|w| w.state == WireState::Pending)
        .count();
    let peers: std::collections::BTreeSet<&str> = (records.wires.values())
        .filter_map(|w| w.peer_node.as_deref())
        .collect();
    json!({
        "ends": records.wires.len(),
        "pending": pending,
        "peers": peers.into_iter().collect::<Vec<_>>().join(","),
    })
}

fn item(w: &WireRecord) -> Value {
    let mut item = json!({
        "link_id": w.link_uid,
        "topo_namespace": w.topo_namespace,
        "local_pod_name": w.local_pod_name,
        "local_pod_iface_name": w.local_pod_ifname,
        "local_pod_ip": w.local_pod_ip.clone().unwrap_or_default(),
        "local_pod_net_ns": w.local_pod_netns,
        "node_name": w.node_name,
        // meshnet's field is the address alone; xwire's record has the port too.
        "gwire_peer_node_ip": w.peer_node_ip.as_deref().map(address_ip).unwrap_or_default(),
        "peer_node_address": w.peer_node_ip.clone().unwrap_or_default(),
        "wire_iface_name_on_local_node": w.wire_ifname,
        // An int64 in meshnet's schema: the id's 64 bits as one.
        "wire_iface_id_on_peer_node": w.peer_intf_id.0 as i64,
        "peer_pod": w.peer_pod,
        "peer_node": w.peer_node.clone().unwrap_or_default(),
        "state": w.state,
        "container_id": w.container_id,
    });
    // xwire's own, and only where known (records written before it was kept have none).
    if let Some(id) = w.local_pod_netns_id {
        item["local_pod_net_ns_id"] = json!(id);
    }
    item
}

fn address_ip(address: &str) -> String {
    address
        .parse::<std::net::SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| address.to_owned())
}

/// The records an object holds. Items that do not parse (written by someone else, or
/// by hand) are left out and named in the second list.
pub fn records(object: &Value) -> (NamespaceRecords, Vec<String>) {
    let mut records = NamespaceRecords::default();
    let mut bad = Vec::new();
    let status = &object["status"];
    for (at, value) in status["grpcWireItems"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        match wire(value) {
            Some(w) => {
                records.wires.insert(w.key(), w);
            }
            None => bad.push(format!("grpcWireItems[{at}]")),
        }
    }
    for (at, value) in status["xwireAttachments"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        match serde_json::from_value::<AttachmentRecord>(value.clone()) {
            Ok(a) => {
                records.attachments.insert(a.key(), a);
            }
            Err(_) => bad.push(format!("xwireAttachments[{at}]")),
        }
    }
    (records, bad)
}

fn wire(v: &Value) -> Option<WireRecord> {
    let text = |field: &str| v.get(field).and_then(Value::as_str).map(str::to_owned);
    let optional = |field: &str| text(field).filter(|s| !s.is_empty());
    Some(WireRecord {
        node_name: text("node_name")?,
        link_uid: v.get("link_id")?.as_u64()?,
        topo_namespace: text("topo_namespace")?,
        local_pod_netns: text("local_pod_net_ns")?,
        local_pod_netns_id: v
            .get("local_pod_net_ns_id")
            .and_then(|id| serde_json::from_value(id.clone()).ok()),
        local_pod_name: text("local_pod_name")?,
        local_pod_ip: optional("local_pod_ip"),
        local_pod_ifname: text("local_pod_iface_name")?,
        wire_ifname: text("wire_iface_name_on_local_node").unwrap_or_default(),
        peer_intf_id: WireId(v.get("wire_iface_id_on_peer_node")?.as_i64()? as u64),
        peer_node_ip: optional("peer_node_address").or_else(|| optional("gwire_peer_node_ip")),
        peer_pod: text("peer_pod")?,
        peer_node: optional("peer_node"),
        state: serde_json::from_value::<WireState>(v.get("state")?.clone()).ok()?,
        container_id: text("container_id")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::local::PodRef;

    const NETNS_ID: xwire_netns::NetnsIdentity = xwire_netns::NetnsIdentity {
        dev: 4,
        ino: 4_026_532_871,
    };

    fn records() -> NamespaceRecords {
        let mut r = NamespaceRecords::default();
        for (uid, state, id) in [
            (0, WireState::Remote, u64::MAX - 7),
            (3, WireState::Pending, 12),
        ] {
            let w = WireRecord {
                node_name: "n1".into(),
                link_uid: uid,
                topo_namespace: "lab".into(),
                local_pod_netns: "/var/run/netns/cni-1".into(),
                // Records written before the namespace's identity was kept have none.
                local_pod_netns_id: (uid == 0).then_some(NETNS_ID),
                local_pod_name: "r1".into(),
                local_pod_ip: (uid == 0).then(|| "10.0.0.1/30".into()),
                local_pod_ifname: format!("eth{}", uid + 1),
                wire_ifname: if uid == 0 {
                    "xw-1".into()
                } else {
                    String::new()
                },
                peer_intf_id: WireId(id),
                peer_node_ip: (uid == 0).then(|| "192.0.2.2:7470".into()),
                peer_pod: "r2".into(),
                peer_node: (uid == 0).then(|| "n2".into()),
                state,
                container_id: "c1".into(),
            };
            r.wires.insert(w.key(), w);
        }
        let a = AttachmentRecord {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            network: "kindnet".into(),
            pod: PodRef {
                namespace: "lab".into(),
                name: "r1".into(),
            },
            netns: "/var/run/netns/cni-1".into(),
            netns_id: Some(NETNS_ID),
        };
        r.attachments.insert(a.key(), a);
        r
    }

    #[test]
    fn records_survive_the_round_trip_through_meshnet_fields() {
        let written = records();
        let object = status("n1", "lab", &written);
        let item = &object["status"]["grpcWireItems"][0];
        assert_eq!(item["link_id"], 0);
        assert_eq!(item["gwire_peer_node_ip"], "192.0.2.2");
        assert!(item["wire_iface_id_on_peer_node"].is_i64());
        assert_eq!(object["status"]["grpcWireItems"][1]["local_pod_ip"], "");
        assert_eq!(
            object["status"]["xwireSummary"],
            json!({"ends": 2, "pending": 1, "peers": "n2"})
        );
        assert_eq!(
            item["local_pod_net_ns_id"],
            json!({"dev": 4, "ino": 4_026_532_871u64})
        );
        assert!(object["status"]["grpcWireItems"][1]
            .get("local_pod_net_ns_id")
            .is_none());
        let (read, bad) = super::records(&object);
        assert!(bad.is_empty());
        assert_eq!(read, written);
        let object = super::object("n1", "n1", Some("u-1"), "lab", &written);
        assert_eq!(object["spec"]["uids"], json!([0, 3]));
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let unowned = super::object("n1", "n1", None, "lab", &written);
        assert!(unowned["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn records_too_large_for_one_object_are_split_by_pod() {
        let small = records();
        assert_eq!(parts("n1", "lab", &small), vec![("n1".to_owned(), small)]);
        // 3,000 ends and 1,500 attachments: 1,500 pods on one node.
        let mut large = NamespaceRecords::default();
        let (end, attachment) = {
            let r = records();
            let end = r.wires.values().next().unwrap().clone();
            (end, r.attachments.values().next().unwrap().clone())
        };
        for pod in 0..1500 {
            let name = format!("r{pod}");
            for uid in [2 * pod, 2 * pod + 1] {
                let mut w = end.clone();
                w.local_pod_name = name.clone();
                w.link_uid = uid;
                large.wires.insert(w.key(), w);
            }
            let mut a = attachment.clone();
            a.pod.name = name;
            a.container_id = format!("c{pod}");
            large.attachments.insert(a.key(), a);
        }
        let split = parts("n1", "lab", &large);
        assert!(split.len() > 1, "{}", split.len());
        let names: Vec<&str> = split.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[..2], ["n1", "n1.xwire-part-1"]);
        let mut joined = NamespaceRecords::default();
        for (name, part) in &split {
            let bytes = serde_json::to_vec(&status(name, "lab", part))
                .unwrap()
                .len();
            assert!(bytes < 3 * PART_BYTES, "{name}: {bytes} bytes");
            // A pod's ends and attachment are in one part.
            for a in part.attachments.values() {
                let ends = part
                    .wires
                    .values()
                    .filter(|w| w.local_pod_name == a.pod.name);
                assert_eq!(ends.count(), 2, "{name}: {}", a.pod.name);
            }
            joined.wires.extend(part.wires.clone());
            joined.attachments.extend(part.attachments.clone());
        }
        assert_eq!(joined, large);
        // The same records split the same way.
        assert_eq!(parts("n1", "lab", &large), split);
    }

    #[test]
    fn items_that_do_not_parse_are_named_and_left_out() {
        let mut object = status("n1", "lab", &records());
        object["status"]["grpcWireItems"][1]["link_id"] = json!("three");
        object["status"]["xwireAttachments"][0] = json!({"container_id": 5});
        let (read, bad) = super::records(&object);
        assert_eq!(read.wires.len(), 1);
        assert!(read.attachments.is_empty());
        assert_eq!(bad, ["grpcWireItems[1]", "xwireAttachments[0]"]);
    }
}
