//! Who the node's peers are, and which node pool it is in, while the daemon runs: the
//! cluster's Node objects, watched (`store::kube::NodeWatch`), or the configuration
//! alone (`Configured`). It is apart from the store: what the node keeps (wires,
//! attachments, topologies) is one question and who else is there another, even where
//! one backend, a cluster's API server, answers both.

/// A change in the cluster's nodes, as a node's peers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PeerChange {
    /// A node to share wires with, at this address (new, or moved).
    Joined {
        name: String,
        address: std::net::SocketAddr,
    },
    /// The node left the cluster.
    Left { name: String },
}

/// The node pools a cluster's Node labels make (see `store::kube::pools`), and this
/// node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LabelledPools {
    pub member_of: String,
    pub pools: Vec<xwire_model::pools::PoolSpec>,
}

/// What changed in the node's peers and pools since the node last asked.
pub(crate) trait Membership: Send {
    /// Nodes that joined or left since the last call; the first call lists every node.
    fn take_peer_changes(&self) -> Vec<PeerChange>;
    /// The pools the cluster's Node labels make, when they changed since the last call
    /// (`Some(None)`: this node is in no pool now); `None`: no change.
    fn take_pools_change(&self) -> Option<Option<LabelledPools>>;
}

/// The configuration's peers (`[[peers]]`) and pools (`[pools]`), declared at start:
/// nothing changes while the daemon runs.
pub(crate) struct Configured;

impl Membership for Configured {
    fn take_peer_changes(&self) -> Vec<PeerChange> {
        Vec::new()
    }

    fn take_pools_change(&self) -> Option<Option<LabelledPools>> {
        None
    }
}
