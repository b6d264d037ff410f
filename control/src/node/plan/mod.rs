//! Reconciliation's decision: from what the node should have (`Desired`) and what it
//! has (`Observed`), the list of actions that brings one to the other. Pure: plain data
//! in, plain data out, no namespace, no store, no fast path; `reconcile.rs` observes
//! and applies. A node whose plan is empty is as its topologies say (CHECK asks exactly
//! that of one pod), and a plan applied in full leaves the next one empty.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use xwire_proto::control::{Carrier, WireKey};
use xwire_proto::local::PodRef;

use crate::interfaces::{self, InterfaceState};
use crate::node::vxlan::tunnel_ifname;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

mod end;
use end::End;

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
}

/// One step towards the desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        }
    }
}

/// The actions that bring `observed` to `desired`, in the order to apply them.
pub(crate) fn plan(desired: &Desired, observed: &Observed) -> Vec<Action> {
    let mut planner = Planner::new(desired, observed);
    if let Some(reason) = &observed.node_unreadable {
        planner.actions.push(Action::Unreachable {
            pod: format!("node {}", observed.node_name),
            reason: reason.clone(),
        });
    }
    for pod in &desired.pods {
        planner.pod(pod);
    }
    if let Some(pod) = &observed.detached {
        for (key, _) in records_of(observed, &pod.namespace, &pod.name) {
            planner.actions.push(Action::RemoveWire {
                key: key.clone(),
                why: "no attachment: removed",
            });
        }
    }
    if observed.whole_node {
        planner.sweep();
    }
    planner.actions
}

/// One pass of `plan`: what it has decided, and what it has learned on the way that
/// later decisions need.
struct Planner<'a> {
    desired: &'a Desired,
    observed: &'a Observed,
    actions: Vec<Action>,
    /// Pods whose records stay (reconciled, or not looked at).
    kept: HashSet<(&'a str, &'a str)>,
    /// Ends a join of their far end (a same-node veth) makes along with it.
    covered: HashSet<EndKey>,
    /// Records that this plan removes, whose interfaces and ports go with them.
    removed: HashSet<&'a EndKey>,
    /// Node ends of half-made remote ends (see `Action::Join`), which no record names.
    kept_node_ends: HashSet<String>,
    /// Pods attached here whose namespace is not gone: a link's far end in one of them
    /// is joined with a same-node veth.
    attached: HashMap<(&'a str, &'a str), &'a AttachmentRecord>,
}

impl<'a> Planner<'a> {
    fn new(desired: &'a Desired, observed: &'a Observed) -> Planner<'a> {
        let attached = desired
            .pods
            .iter()
            .map(|p| &p.attachment)
            .filter(|a| !matches!(observed.pods.get(&a.key()), Some(PodNetns::Gone)))
            .map(|a| ((a.pod.namespace.as_str(), a.pod.name.as_str()), a))
            .collect();
        Planner {
            desired,
            observed,
            actions: Vec::new(),
            kept: HashSet::new(),
            covered: HashSet::new(),
            removed: HashSet::new(),
            kept_node_ends: HashSet::new(),
            attached,
        }
    }

    /// An attached pod: forgotten when its namespace is gone, left when it cannot be
    /// looked at, else its records of links it no longer has removed and each link's
    /// end planned.
    fn pod(&mut self, pod: &'a DesiredPod) {
        let observed = self.observed;
        let attachment = &pod.attachment;
        let (namespace, name) = (&attachment.pod.namespace, &attachment.pod.name);
        let interfaces = match observed.pods.get(&attachment.key()) {
            Some(PodNetns::Open(interfaces)) => interfaces,
            None if !observed.whole_node => {
                self.kept.insert((namespace, name));
                return;
            }
            Some(PodNetns::Unreadable(reason)) => {
                self.kept.insert((namespace, name));
                self.actions.push(Action::Unreachable {
                    pod: format!("{namespace}/{name}"),
                    reason: reason.clone(),
                });
                return;
            }
            Some(PodNetns::Gone) | None => {
                self.actions.push(Action::ForgetPod {
                    attachment: attachment.key(),
                });
                let records = records_of(observed, namespace, name);
                self.removed.extend(records.map(|r| r.0));
                return;
            }
        };
        self.kept.insert((namespace, name));
        for (key, record) in records_of(observed, namespace, name) {
            if !pod.links.iter().any(|l| l.uid == record.link_uid) {
                self.removed.insert(key);
                self.actions.push(Action::RemoveWire {
                    key: key.clone(),
                    why: "not in the topology any more: removed",
                });
            }
        }
        for link in pod.links.iter() {
            self.link(attachment, link, interfaces);
        }
    }

    /// One link's end in a pod whose namespace is open.
    fn link(
        &mut self,
        attachment: &'a AttachmentRecord,
        link: &'a LinkSpec,
        interfaces: &'a Interfaces,
    ) {
        let (desired, observed) = (self.desired, self.observed);
        let namespace = &attachment.pod.namespace;
        let key = EndKey::new(namespace, &attachment.pod.name, link.uid);
        if self.covered.contains(&key) {
            return;
        }
        let local_peer = self
            .attached
            .get(&(namespace.as_str(), link.peer_pod.as_str()))
            .filter(|peer| peer.key() != attachment.key())
            .copied();
        let wire = link.wire(namespace);
        let unjoined = observed
            .records
            .get(&key)
            .is_none_or(|r| r.state == WireState::Pending);
        let half_made = (local_peer.is_none() && unjoined)
            .then(|| half_made_node_end(attachment, link, interfaces, observed))
            .flatten();
        if let Some(node_end) = &half_made {
            self.kept_node_ends.insert(node_end.clone());
        }
        let end = End {
            attachment,
            link,
            interfaces,
            half_made: half_made.is_some(),
        };
        let action = match observed.records.get(&key) {
            None => Some(end.join("joined")),
            Some(record)
                if record.state.crosses_nodes()
                    && desired.withdrawn.get(&wire) == record.peer_node.as_ref() =>
            {
                Some(Action::Unjoin { key: key.clone() })
            }
            Some(record)
                if record.state != WireState::Pending
                    && (desired.rebuild.contains(&key)
                        || !made_for(record, link, desired.through_switch(&wire))) =>
            {
                Some(Action::Rebuild {
                    attachment: attachment.key(),
                    uid: link.uid,
                })
            }
            Some(record) => match record.state {
                WireState::Pending => {
                    let remote_peer = desired
                        .remote_ends
                        .get(&wire)
                        .is_some_and(|pod| *pod == link.peer_pod);
                    (local_peer.is_some() || remote_peer).then(|| end.join("joined"))
                }
                WireState::Veth if !interfaces.contains_key(&record.local_pod_ifname) => {
                    Some(Action::RemakeVeth {
                        attachment: attachment.key(),
                        uid: link.uid,
                    })
                }
                WireState::Veth => end.configure(),
                WireState::Remote | WireState::Switched if observed.node_unreadable.is_some() => {
                    None
                }
                WireState::Remote => end.remote(observed, record, &key),
                WireState::Vxlan => end.vxlan(observed, record, &key),
                WireState::Switched => end.switched(observed, record, &key),
            },
        };
        // A join with the far end's pod attached here makes that end too (one veth).
        if matches!(
            action,
            Some(Action::Join { .. } | Action::RemakeVeth { .. } | Action::Rebuild { .. })
        ) {
            if let Some(peer) = local_peer {
                self.covered
                    .insert(EndKey::new(namespace, &peer.pod.name, link.uid));
            }
        }
        self.actions.extend(action);
    }

    /// What no attached pod accounts for, where the whole node was looked at: records of
    /// pods not attached, ports of no staying record, and interfaces with this node's
    /// mark that no record names.
    fn sweep(&mut self) {
        let observed = self.observed;
        for (key, record) in &observed.records {
            let pod = (
                record.topo_namespace.as_str(),
                record.local_pod_name.as_str(),
            );
            if !self.kept.contains(&pod) && !self.removed.contains(key) {
                self.removed.insert(key);
                self.actions.push(Action::RemoveWire {
                    key: key.clone(),
                    why: "no attachment: removed",
                });
            }
        }
        let staying_remote: HashSet<&EndKey> = observed
            .records
            .iter()
            .filter(|(key, r)| r.has_node_end() && !self.removed.contains(key))
            .map(|(key, _)| key)
            .collect();
        let mut stray_ports: Vec<&EndKey> = observed
            .ports
            .iter()
            .filter(|key| !staying_remote.contains(key) && !self.removed.contains(key))
            .collect();
        stray_ports.sort();
        for key in stray_ports {
            self.actions.push(Action::ClosePort { key: key.clone() });
        }
        if observed.node_unreadable.is_some() {
            return;
        }
        let named: HashSet<String> = observed.records.values().flat_map(node_side).collect();
        let mine = interfaces::node_alias_prefix(&observed.node_name);
        for (name, interface) in &observed.node_interfaces {
            let Some(alias) = interface.alias.as_deref() else {
                continue;
            };
            if alias.starts_with(&mine)
                && !named.contains(name)
                && !self.kept_node_ends.contains(name)
            {
                self.actions.push(Action::RemoveNodeInterface {
                    name: name.clone(),
                    alias: alias.to_owned(),
                });
            }
        }
    }
}

/// Whether a joined end's record is of `link` as it is: the same interface, to the same
/// pod (and, for a same-node veth, to the same interface there), a wire to another node
/// on the kernel's VXLAN exactly when its link says so, and through the fast path
/// exactly when it is to go `through_switch` (a same-node wire switched, a VXLAN wire
/// bridged).
fn made_for(record: &WireRecord, link: &LinkSpec, through_switch: bool) -> bool {
    let vxlan = link.carrier == Some(Carrier::Vxlan);
    record.local_pod_ifname == link.local_intf
        && record.peer_pod == link.peer_pod
        && match record.state {
            WireState::Veth => record.wire_ifname == link.peer_intf && !through_switch,
            WireState::Switched => through_switch,
            WireState::Remote => !vxlan,
            WireState::Vxlan => vxlan && through_switch == record.has_node_end(),
            WireState::Pending => true,
        }
}

impl Desired {
    /// Whether `wire` is to go through the switch where it would not otherwise: a
    /// same-node wire switched, or a VXLAN wire bridged.
    fn through_switch(&self, wire: &WireKey) -> bool {
        self.switched.contains(wire) || self.bridged.contains(wire)
    }
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

/// The records of one pod, by key.
fn records_of<'a>(
    observed: &'a Observed,
    namespace: &'a str,
    pod: &'a str,
) -> impl Iterator<Item = (&'a EndKey, &'a WireRecord)> {
    observed
        .records
        .iter()
        .filter(move |(_, r)| r.topo_namespace == namespace && r.local_pod_name == pod)
}

/// The name of the node end, when both interfaces of a remote end are in place with this
/// node's marks for this end (see `Action::Join`).
fn half_made_node_end(
    attachment: &AttachmentRecord,
    link: &LinkSpec,
    pod_interfaces: &Interfaces,
    observed: &Observed,
) -> Option<String> {
    let pod = &attachment.pod;
    let pod_alias = interfaces::pod_alias(&pod.namespace, &pod.name, link.uid);
    let in_pod = pod_interfaces.get(&link.local_intf)?;
    if in_pod.alias.as_deref() != Some(pod_alias.as_str()) {
        return None;
    }
    let node_alias =
        interfaces::node_alias(&observed.node_name, &pod.namespace, &pod.name, link.uid);
    observed
        .node_interfaces
        .iter()
        .find(|(_, i)| i.alias.as_deref() == Some(node_alias.as_str()))
        .map(|(name, _)| name.clone())
}

#[cfg(test)]
mod tests;
