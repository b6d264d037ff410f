//! meshnet's GWireKObj (`gwirekobjs.networkop.co.uk/v1beta1`) as the wire store: one
//! object per node per topology namespace, named after the node. `spec.uids` lists the
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
    node: &str,
    node_uid: Option<&str>,
    namespace: &str,
    records: &NamespaceRecords,
) -> Value {
    let mut object = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": node, "namespace": namespace, "labels": {NODE_LABEL: node}},
        "spec": {"uids": records.uids()},
    });
    if let Some(uid) = node_uid {
        object["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
        }]);
    }
    object
}

/// The object's status (for the status subresource).
pub fn status(node: &str, namespace: &str, records: &NamespaceRecords) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": {"name": node, "namespace": namespace},
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
        let object = super::object("n1", Some("u-1"), "lab", &written);
        assert_eq!(object["spec"]["uids"], json!([0, 3]));
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let unowned = super::object("n1", None, "lab", &written);
        assert!(unowned["metadata"].get("ownerReferences").is_none());
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
