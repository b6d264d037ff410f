//! Reconciliation's decision: from what the node should have (`Desired`) and what it
//! has (`Observed`), the list of actions that brings one to the other. Pure: plain data
//! in, plain data out, no namespace, no store, no fast path; `reconcile.rs` observes
//! and applies. A node whose plan is empty is as its topologies say (CHECK asks exactly
//! that of one pod), and a plan applied in full leaves the next one empty.
//!
//! One sub-planner per kind of thing a node keeps, each in its file: the wire ends
//! (`wires.rs`), steering same-node wires through the switch (`steering.rs`), the
//! impairments its ports were told (`impairments.rs`) and the pods' routes and rules
//! (`routes.rs`). A pass plans and applies in two stages, the wire ends and then their
//! settings (the other three), because the settings are of interfaces and ports that
//! the first stage makes: a port opened by a join has its impairment told by the second.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use xwire_fastpath::impairment::ImpairmentSpec;
use xwire_proto::control::WireKey;
use xwire_proto::local::PodRef;

use crate::interfaces::InterfaceState;
use crate::node::vxlan::tunnel_ifname;
use crate::routing::{PodRouting, PodRoutingSpec, RoutingSeen};
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

mod end;
mod impairments;
mod routes;
mod steering;
mod wires;

pub(crate) use steering::{SteeringSeen, SteeringWanted};

/// An attached pod and the links its topology gives it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DesiredPod {
    pub(crate) attachment: AttachmentRecord,
    /// By uid, ascending.
    pub(crate) links: Arc<Vec<LinkSpec>>,
}

/// What the node should have.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Desired {
    pub(crate) pods: Vec<DesiredPod>,
    /// The far ends of wires that other nodes announced: the pod each runs.
    pub(crate) remote_ends: HashMap<WireKey, String>,
    /// Wire ends (record keys) whose link changed in its topology: made anew.
    pub(crate) rebuild: HashSet<EndKey>,
    /// Far ends their node has let go of (DelWire, or left out of a Sync): the wire
    /// joined to that node goes back to pending.
    pub(crate) withdrawn: HashMap<WireKey, String>,
    /// Same-node wires that go through the fast path (impaired or captured); the others
    /// are a veth straight between the two pods.
    pub(crate) switched: HashSet<WireKey>,
    /// VXLAN wires bridged through the switch (impaired or captured); the others are a
    /// VXLAN device in the pod.
    pub(crate) bridged: HashSet<WireKey>,
    /// What the links of same-node wires ask of steering, of the wires the settings
    /// stage looks at.
    pub(crate) steering: BTreeMap<WireKey, SteeringWanted>,
    /// The impairment each end's link asks for (what it sends), of the ends the settings
    /// stage looks at.
    pub(crate) impairments: BTreeMap<EndKey, Option<ImpairmentSpec>>,
    /// What the Topology of each pod the settings stage looks at asks of its routes and
    /// rules.
    pub(crate) routing: BTreeMap<AttachmentKey, PodRoutingSpec>,
    /// What the node's pools ask of the pools' routing table, where the node is in a
    /// pool and the whole node is looked at.
    pub(crate) pool_routing: Option<PodRouting>,
}

/// The interfaces of one namespace, by name.
pub(crate) type Interfaces = BTreeMap<String, InterfaceState>;

/// What a pod's network namespace was found to be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PodNetns {
    Open(Interfaces),
    /// Nothing at its path, or not a network namespace: the pod is gone.
    Gone,
    /// It could not be looked at (no file descriptors left, say): left as it is.
    Unreadable(String),
}

/// What the node has.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Observed {
    pub(crate) node_name: String,
    /// Whether the whole node was looked at, or only the pods in `pods` (CHECK): then
    /// the others are taken as they are, and nothing node-wide is swept.
    pub(crate) whole_node: bool,
    /// A pod whose attachment goes (DEL): its records are removed, whatever the scope.
    pub(crate) detached: Option<PodRef>,
    /// The wire records, by key: every one for the whole node, else those of the pods
    /// looked at and of the `detached` one.
    pub(crate) records: BTreeMap<EndKey, WireRecord>,
    /// Each observed attachment's namespace, by attachment key.
    pub(crate) pods: HashMap<AttachmentKey, PodNetns>,
    pub(crate) node_interfaces: Interfaces,
    /// Why the node's interfaces could not be listed, if they could not: then no remote
    /// end is judged (its node end might be there) and no node interface swept.
    pub(crate) node_unreadable: Option<String>,
    /// The wire ends (record keys) that have a fast-path port open.
    pub(crate) ports: HashSet<EndKey>,
    /// The same-node wires the settings stage looks at, as they are.
    pub(crate) steering: BTreeMap<WireKey, SteeringSeen>,
    /// The impairment each end's port was last told, of the ends with a port that the
    /// settings stage looks at.
    pub(crate) impairments: BTreeMap<EndKey, Option<ImpairmentSpec>>,
    /// xwire's routes and rules in each pod the settings stage looks at, as read back.
    pub(crate) routing: BTreeMap<AttachmentKey, RoutingSeen>,
    /// xwire's rules and routes of the pools' table on the node, as read back.
    pub(crate) pool_routing: Option<RoutingSeen>,
}

/// One step towards the desired state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// The pod's namespace is gone: its wires go (their peers are told) and so does its
    /// attachment.
    ForgetPod { attachment: AttachmentKey },
    /// The pod cannot be looked at now; its wires are left as they are.
    Unreachable { pod: String, reason: String },
    /// A record no link or no attachment accounts for: its end is taken apart.
    RemoveWire { key: EndKey, why: &'static str },
    /// Joins the end of `uid` of the pod of `attachment` as far as is possible now
    /// (recorded pending when its far end is nowhere yet).
    Join {
        attachment: AttachmentKey,
        uid: u64,
        why: &'static str,
        /// Both interfaces of a remote end are there, made by this node for this very
        /// end, with no record saying so (a run stopped between making them and writing
        /// it): they are taken as they are, so the pod keeps its interface.
        half_made: bool,
    },
    /// A same-node veth lost its pod end: it goes back to pending and is joined again.
    RemakeVeth { attachment: AttachmentKey, uid: u64 },
    /// The far end's node let go of it: the end goes back to pending.
    Unjoin { key: EndKey },
    /// The end's link is not the one it was made for (its topology changed): taken apart
    /// and joined anew.
    Rebuild { attachment: AttachmentKey, uid: u64 },
    /// A remote end with both interfaces in place and no fast-path port (the run that
    /// opened it ended): the port is opened again.
    Reattach { attachment: AttachmentKey, uid: u64 },
    /// A remote end with an interface gone: made again.
    RepairRemote { attachment: AttachmentKey, uid: u64 },
    /// The pod has an interface of the end's name that xwire did not make: nothing is
    /// done over it.
    Foreign {
        key: EndKey,
        ifname: String,
        alias: Option<String>,
    },
    /// The pod's end exists but not as the topology says (`differs` says how): its
    /// settings are applied again.
    Configure {
        attachment: AttachmentKey,
        uid: u64,
        differs: Vec<String>,
    },
    /// A fast-path port with no remote wire.
    ClosePort { key: EndKey },
    /// A node-side interface this node made that no record names.
    RemoveNodeInterface { name: String, alias: String },
    /// A same-node veth to steer through the switch in place (impaired or captured).
    Steer {
        wire: WireKey,
        /// The pods of its two ends.
        pods: [String; 2],
        max_frame: usize,
    },
    /// A steered wire that is to be a straight veth again.
    Unsteer { wire: WireKey, pods: [String; 2] },
    /// An end's port is to be told its link's impairment (`None`: none).
    Impair {
        key: EndKey,
        impairment: Option<ImpairmentSpec>,
    },
    /// A pod's routes and rules are not what its Topology asks for (`differs` says how).
    Route {
        attachment: AttachmentKey,
        pod: String,
        differs: Vec<String>,
    },
    /// The node's routes to the other pools are not what its pool's gateways ask for.
    PoolRoutes { differs: Vec<String> },
}

impl Action {
    /// The wire or pod it concerns, as reports name it.
    pub(crate) fn subject(&self) -> String {
        match self {
            Action::ForgetPod { attachment } => attachment.to_string(),
            Action::Unreachable { pod, .. } => pod.clone(),
            Action::RemoveWire { key, .. }
            | Action::Unjoin { key }
            | Action::Foreign { key, .. }
            | Action::ClosePort { key } => key.to_string(),
            Action::Join {
                attachment, uid, ..
            }
            | Action::RemakeVeth { attachment, uid }
            | Action::Rebuild { attachment, uid }
            | Action::Reattach { attachment, uid }
            | Action::RepairRemote { attachment, uid }
            | Action::Configure {
                attachment, uid, ..
            } => format!("{attachment}#{uid}"),
            Action::RemoveNodeInterface { name, .. } => name.clone(),
            Action::Steer { wire, .. } | Action::Unsteer { wire, .. } => {
                format!("{}#{}", wire.namespace, wire.link_uid)
            }
            Action::Impair { key, .. } => key.to_string(),
            Action::Route { pod, .. } => pod.clone(),
            Action::PoolRoutes { .. } => "the pools' routes".into(),
        }
    }

    /// What differs, in words (CHECK's answer).
    pub(crate) fn describe(&self) -> String {
        match self {
            Action::ForgetPod { .. } => "the pod's namespace is gone".into(),
            Action::Unreachable { reason, .. } => {
                format!("its namespace cannot be opened now: {reason}")
            }
            Action::RemoveWire { key, why } => format!("wire {key} is {why}"),
            Action::Unjoin { key } => format!("wire {key}'s far end is gone"),
            Action::Join { uid, why, .. } => format!("link uid {uid} is to be {why}"),
            Action::RemakeVeth { uid, .. } => format!("link uid {uid}: its veth is gone"),
            Action::Rebuild { uid, .. } => {
                format!("link uid {uid}: its wire was made for another link")
            }
            Action::Reattach { uid, .. } => {
                format!("link uid {uid}: its wire has no fast-path port")
            }
            Action::RepairRemote { uid, .. } => {
                format!("link uid {uid}: an interface of its wire is missing")
            }
            Action::Foreign { ifname, alias, .. } => {
                format!("{ifname} is not xwire's (its alias is {alias:?})")
            }
            Action::Configure { differs, .. } => differs.join("; "),
            Action::ClosePort { key } => format!("fast-path port of {key} has no wire"),
            Action::RemoveNodeInterface { name, .. } => {
                format!("node interface {name} has no wire")
            }
            Action::Steer { wire, .. } => format!(
                "link uid {}: impaired or captured, and not steered through the switch",
                wire.link_uid
            ),
            Action::Unsteer { wire, .. } => format!(
                "link uid {}: steered through the switch, and neither impaired nor captured",
                wire.link_uid
            ),
            Action::Impair { key, impairment } => format!(
                "the fast path of {key} was not told its link's impairment ({})",
                if impairment.is_some() { "one" } else { "none" }
            ),
            Action::Route { differs, .. } | Action::PoolRoutes { differs } => differs.join("; "),
        }
    }

    /// Whether it concerns the pod of `attachment` (for CHECK).
    pub(crate) fn concerns(&self, attachment: &AttachmentRecord) -> bool {
        let key = attachment.key();
        let (namespace, pod) = (&attachment.pod.namespace, &attachment.pod.name);
        match self {
            Action::ForgetPod { attachment } => *attachment == key,
            Action::Unreachable { pod: label, .. } => *label == format!("{namespace}/{pod}"),
            Action::RemoveWire { key: wire, .. }
            | Action::Unjoin { key: wire }
            | Action::Foreign { key: wire, .. } => wire.is_of_pod(namespace, pod),
            Action::Join { attachment, .. }
            | Action::RemakeVeth { attachment, .. }
            | Action::Rebuild { attachment, .. }
            | Action::Reattach { attachment, .. }
            | Action::RepairRemote { attachment, .. }
            | Action::Configure { attachment, .. } => *attachment == key,
            Action::ClosePort { .. } | Action::RemoveNodeInterface { .. } => false,
            Action::Steer { wire, pods, .. } | Action::Unsteer { wire, pods } => {
                wire.namespace == *namespace && pods.iter().any(|p| p == pod)
            }
            Action::Impair { key: end, .. } => end.is_of_pod(namespace, pod),
            Action::Route { attachment, .. } => *attachment == key,
            Action::PoolRoutes { .. } => false,
        }
    }
}

/// Every action that brings `observed` to `desired`: the wire ends', then their
/// settings'. What CHECK asks of one pod; a pass applies the two stages apart.
pub(crate) fn plan(desired: &Desired, observed: &Observed) -> Vec<Action> {
    let mut actions = wires(desired, observed);
    actions.extend(settings(desired, observed));
    actions
}

/// The wire ends' actions (`wires.rs`).
pub(crate) fn wires(desired: &Desired, observed: &Observed) -> Vec<Action> {
    wires::plan(desired, observed)
}

/// The settings' actions: steering, then impairments (a wire steered now has ports that
/// start with none), then the pods' routes, then the node's routes to the other pools.
pub(crate) fn settings(desired: &Desired, observed: &Observed) -> Vec<Action> {
    let mut actions = steering::plan(desired, observed);
    let impairing = impairments::plan(desired, observed, &actions);
    actions.extend(impairing);
    actions.extend(routes::plan(desired, observed));
    actions
}

/// The names of the interfaces `record`'s end has on the node's side: the veth's node
/// end of a remote, switched or bridged VXLAN end, and a bridged VXLAN end's tunnel.
pub(crate) fn node_side(record: &WireRecord) -> Vec<String> {
    if !record.has_node_end() {
        return Vec::new();
    }
    let mut names = vec![record.wire_ifname.clone()];
    if record.state == WireState::Vxlan {
        names.push(tunnel_ifname(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        ));
    }
    names
}

#[cfg(test)]
mod tests;
