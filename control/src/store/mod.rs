//! What the daemon persists: the topologies it was given (the embedded topology source),
//! one record per wire end on this node (the fields of meshnet's GWire), and one record
//! per CNI attachment. Behind traits, so that a Kubernetes backend (GWireKObj and
//! Topology resources) can stand in for the embedded one.

mod embedded;
pub mod kube;

pub use embedded::EmbeddedStore;
pub use kube::{client as kube_client, PodReport, SIGNER_NAME};
pub(crate) use kube::{KubeSettings, KubeStore};

use serde::{Deserialize, Serialize};
use xwire_netns::NetnsIdentity;
use xwire_proto::control::WireKey;
use xwire_proto::local::PodRef;
use xwire_proto::WireId;

use crate::topology::Topology;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("wire store {path}: {message}")]
    Backend { path: String, message: String },
    #[error("wire store record {key}: {message}")]
    Corrupt { key: String, message: String },
}

/// How a wire end on this node is joined to its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireState {
    /// The peer pod is not up anywhere this node knows of; no interface yet.
    Pending,
    /// A veth straight to the peer pod on this node.
    Veth,
    /// A veth to the node, whose end is a fast-path port joined to the peer node.
    Remote,
    /// A veth to the node, whose end is a fast-path port linked to the peer pod's, on
    /// this node: a same-node wire that is impaired or captured.
    Switched,
    /// A wire to the peer node on the kernel's VXLAN (`carrier: vxlan`): a VXLAN device
    /// in the pod, with nothing on the node's side or in the fast path; or, while the
    /// link is impaired or captured, a veth to the node (`wire_ifname`) whose port the
    /// switch links to a port on a VXLAN device of the node's own.
    Vxlan,
}

impl WireState {
    /// Whether the wire's far end is on another node (`peer_node`), on either carrier.
    pub(crate) fn crosses_nodes(self) -> bool {
        matches!(self, WireState::Remote | WireState::Vxlan)
    }
}

/// One end of a wire on this node: GWire's fields, then xwire's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    pub node_name: String,
    pub link_uid: u64,
    pub topo_namespace: String,
    pub local_pod_netns: String,
    /// Which namespace `local_pod_netns` named at ADD: opened again, the path must still
    /// name it (`AttachmentRecord::netns_id`). None in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_pod_netns_id: Option<NetnsIdentity>,
    pub local_pod_name: String,
    /// CIDR, when the topology gives one.
    pub local_pod_ip: Option<String>,
    pub local_pod_ifname: String,
    /// The wire's interface on this node: the node-side end of a remote wire, or the
    /// peer pod's interface for a same-node wire; empty while pending.
    pub wire_ifname: String,
    /// The wire's id (GWire's `wire_iface_id_on_peer_node`): what its frames carry
    /// between nodes, and the fast path's key for its link.
    pub peer_intf_id: WireId,
    /// The peer node's address, for a remote wire.
    pub peer_node_ip: Option<String>,
    pub peer_pod: String,
    /// The peer node's name, for a remote wire.
    pub peer_node: Option<String>,
    pub state: WireState,
    /// The attachment this end belongs to.
    pub container_id: String,
}

impl WireRecord {
    pub fn key(&self) -> EndKey {
        EndKey::new(&self.topo_namespace, &self.local_pod_name, self.link_uid)
    }

    /// The wire this end belongs to.
    pub fn wire(&self) -> WireKey {
        WireKey::new(self.topo_namespace.as_str(), self.link_uid)
    }

    /// Whether the end is a veth to the node with a fast-path port there: a remote or
    /// switched end, or a VXLAN end bridged through the switch (its `wire_ifname` is
    /// then that veth's node end).
    pub(crate) fn has_node_end(&self) -> bool {
        match self.state {
            WireState::Remote | WireState::Switched => true,
            WireState::Vxlan => !self.wire_ifname.is_empty(),
            WireState::Pending | WireState::Veth => false,
        }
    }
}

/// One end of a wire: the pod that holds it and the wire's link uid, in the topologies'
/// namespace. Its text (`namespace/pod/uid`) is the store's key for the end's record, and
/// the node's key for everything it keeps per end (ports, plan actions).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EndKey(String);

impl EndKey {
    pub fn new(namespace: &str, pod: &str, uid: u64) -> EndKey {
        EndKey(format!("{namespace}/{pod}/{uid}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What the keys of one pod's ends begin with.
    pub(crate) fn prefix_of_pod(namespace: &str, pod: &str) -> String {
        format!("{namespace}/{pod}/")
    }

    /// A key of this text, to bound a range of keys (`prefix_of_pod`).
    pub(crate) fn from_text(text: &str) -> EndKey {
        EndKey(text.to_owned())
    }

    /// Whether this is an end of pod `pod` of `namespace`.
    pub(crate) fn is_of_pod(&self, namespace: &str, pod: &str) -> bool {
        self.0
            .strip_prefix(namespace)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| rest.strip_prefix(pod))
            .is_some_and(|rest| rest.starts_with('/'))
    }
}

#[cfg(test)]
impl From<&str> for EndKey {
    fn from(key: &str) -> EndKey {
        EndKey(key.to_owned())
    }
}

impl std::fmt::Display for EndKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A CNI attachment the daemon manages: what DEL, CHECK and GC look up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentRecord {
    pub container_id: String,
    pub ifname: String,
    /// The network configuration's `name`, which GC is scoped to.
    pub network: String,
    pub pod: PodRef,
    pub netns: String,
    /// Which namespace `netns` named at ADD. The path is opened again later (DEL, a
    /// reconcile, CHECK, a peer pod's veth); a path that has come to name another
    /// namespace (a `/proc/<pid>/ns/net` of a reused pid) is then taken for a namespace
    /// that is gone, and nothing is done in it. None in records written before it was
    /// kept: those paths are trusted as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns_id: Option<NetnsIdentity>,
}

impl AttachmentRecord {
    pub fn key(&self) -> AttachmentKey {
        AttachmentKey::new(&self.container_id, &self.ifname)
    }

    /// Whether `key` is this record's key, without making the key.
    pub(crate) fn has_key(&self, key: &AttachmentKey) -> bool {
        key.as_str()
            .strip_prefix(self.container_id.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            == Some(self.ifname.as_str())
    }
}

/// A CNI attachment: its container id and interface name (`container/ifname`), the
/// store's key for its record and the node's for the plan actions about it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttachmentKey(String);

impl AttachmentKey {
    pub fn new(container_id: &str, ifname: &str) -> AttachmentKey {
        AttachmentKey(format!("{container_id}/{ifname}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
impl From<&str> for AttachmentKey {
    fn from(key: &str) -> AttachmentKey {
        AttachmentKey(key.to_owned())
    }
}

impl std::fmt::Display for AttachmentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The wire and attachment records of this node.
pub trait WireStore {
    fn put_wire(&self, wire: &WireRecord) -> Result<(), StoreError>;
    fn wire(&self, key: &EndKey) -> Result<Option<WireRecord>, StoreError>;
    /// False when there was no such record.
    fn remove_wire(&self, key: &EndKey) -> Result<bool, StoreError>;
    fn wires(&self) -> Result<Vec<WireRecord>, StoreError>;
    /// The wires of one pod (a store that indexes them answers without a scan).
    fn wires_of_pod(&self, namespace: &str, pod: &str) -> Result<Vec<WireRecord>, StoreError> {
        Ok(self
            .wires()?
            .into_iter()
            .filter(|w| w.topo_namespace == namespace && w.local_pod_name == pod)
            .collect())
    }
    fn put_attachment(&self, attachment: &AttachmentRecord) -> Result<(), StoreError>;
    fn attachment(&self, key: &AttachmentKey) -> Result<Option<AttachmentRecord>, StoreError>;
    /// The attachment of a pod, if it has one.
    fn attachment_of_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<AttachmentRecord>, StoreError> {
        Ok(self
            .attachments()?
            .into_iter()
            .find(|a| a.pod.namespace == namespace && a.pod.name == pod))
    }
    fn remove_attachment(&self, key: &AttachmentKey) -> Result<bool, StoreError>;
    fn attachments(&self) -> Result<Vec<AttachmentRecord>, StoreError>;
    /// From here to `end_batch`, changes are kept and made durable together at its end:
    /// one commit (one fsync) for a call's records, not one per record.
    fn begin_batch(&self) {}
    /// Makes what the batch changed durable. An error leaves it to be written at the
    /// next end.
    fn end_batch(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Where pods' links come from.
pub trait TopologySource {
    fn topology(&self, namespace: &str, name: &str) -> Result<Option<Topology>, StoreError>;
    fn topologies(&self) -> Result<Vec<Topology>, StoreError>;
    /// Stores each object, replacing one of the same namespace and name.
    fn put_topologies(&self, topologies: &[Topology]) -> Result<(), StoreError>;
    /// False when there was no such object.
    fn remove_topology(&self, namespace: &str, name: &str) -> Result<bool, StoreError>;
    /// Objects (`namespace/name`) someone else changed since the last call: a watched
    /// source's. The embedded source changes only through the node itself.
    fn take_changes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Whether pods of `namespace` are wired (a cluster's opt-in label); every namespace
    /// is, where there are no labels.
    fn wires_namespace(&self, _namespace: &str) -> bool {
        true
    }
    /// Tells the pod's Topology status how its ADD went (a cluster's objects have a
    /// status; the embedded store keeps none).
    fn report_pod(&self, _report: &PodReport) {}
    /// Where the cluster says `pod` runs, where the source knows pods.
    fn pod_placement(&self, _namespace: &str, _pod: &str) -> PodPlacement {
        PodPlacement::NotTracked
    }
    /// As `pod_placement`, from what the source holds already: never a request to a
    /// server (a pod it has not heard of is not placed yet).
    fn known_placement(&self, namespace: &str, pod: &str) -> PodPlacement {
        self.pod_placement(namespace, pod)
    }
}

/// Where a pod runs, by the word of the cluster itself: the Pod's `spec.nodeName`, which
/// the scheduler writes and no node's daemon may change. A node's daemon may write any
/// Topology's status, so in a cluster the status's `src_ip` is no evidence of where a
/// pod runs (issue 37, item 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodPlacement {
    /// The source knows no pods (the embedded store: a lab file or `xwirectl topology
    /// apply` says where each pod runs, in the Topology's status).
    NotTracked,
    /// No such pod, or it is not scheduled yet.
    Unplaced,
    /// Scheduled on this node.
    On(String),
}

/// What a store whose backend is a cluster's API server answers besides records: the
/// requests made to it, and this node's identity (issued from the cluster's CA Secret or
/// signer). The embedded store has no server and issues nothing: the configuration
/// names the node's certificate.
pub(crate) trait ClusterApi {
    /// Requests made to the store's server so far (watches aside).
    fn requests(&self) -> u64 {
        0
    }
    /// How many objects the server's copy of the node's records lags in (written behind
    /// the node's own journal); none where the store has no server.
    fn unwritten(&self) -> usize {
        0
    }
    /// This node's certificate, key and CA, when the store issues them.
    fn node_identity(&self) -> Result<Option<xwire_fastpath::peer::NodeIdentity>, StoreError> {
        Ok(None)
    }
}

impl ClusterApi for EmbeddedStore {}

/// What a node keeps: its wires and attachments, and the topologies its links come from.
/// The node holds its store as this trait object, so that a second backend (Kubernetes
/// objects) takes nothing more than an implementation of these traits.
pub(crate) trait NodeStore: WireStore + TopologySource + ClusterApi + Send {}

impl<T: WireStore + TopologySource + ClusterApi + Send> NodeStore for T {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pod lab/r1's eth0, container c1.
    pub(crate) fn attachment_c1() -> AttachmentRecord {
        AttachmentRecord {
            container_id: "c1".into(),
            ifname: "eth0".into(),
            network: "labnet".into(),
            pod: PodRef {
                namespace: "lab".into(),
                name: "r1".into(),
            },
            netns: "/run/netns/r1".into(),
            netns_id: None,
        }
    }

    #[test]
    fn an_attachment_has_exactly_its_own_key() {
        let record = attachment_c1();
        assert!(record.has_key(&record.key()));
        for other in [
            "c1/eth1", "c1/eth0x", "c1eth0", "c10/eth0", "c/eth0", "c1/", "",
        ] {
            assert!(!record.has_key(&AttachmentKey::from(other)), "{other}");
        }
    }
}
