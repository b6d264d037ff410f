//! The wire ends' part of the plan: for each attached pod, whether it is forgotten, left
//! as it is, or has each link's end joined, repaired, rebuilt or configured; and, over a
//! whole node, what no attached pod accounts for (records, ports, node interfaces).

use std::collections::{HashMap, HashSet};

use xwire_proto::control::{Carrier, WireKey};

use super::end::End;
use super::{node_side, Action, Desired, DesiredPod, Interfaces, Observed, PodNetns};
use crate::interfaces;
use crate::store::{AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

/// The actions that bring the wire ends of `observed` to `desired`, in the order to
/// apply them.
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
