//! Reconciliation: one idempotent pass that brings what exists on the node (pod and node
//! interfaces, fast-path ports and links) to what the store and the topologies say, and
//! lists each change it made. It is what a start after a crash runs (it re-attaches to
//! the interfaces a previous run made, never recreating one that exists), and it runs
//! again whenever the node is idle after events, and on a timer. A second pass over an
//! unchanged node changes nothing.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::plan::{node_side, plan, Action, Desired, DesiredPod, Interfaces, Observed, PodNetns};
use super::wiring::{log_removal, node_ifname, own_end, Made};
use super::{ErrorKind, Journal, Node, NodeError, Step};
use crate::interfaces::{self, EndSettings};
use crate::netns::{NetnsError, NetnsFd};
use crate::step_times;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;
use xwire_proto::control::Carrier;

/// What one pass did: the changes it made and the ones it could not make.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub changes: Vec<String>,
    pub failures: Vec<String>,
}

impl Reconciled {
    fn changed(&mut self, wire: &str, what: impl std::fmt::Display) {
        tracing::info!(wire, "reconcile: {what}");
        self.changes.push(format!("{wire}: {what}"));
    }

    fn failed(&mut self, wire: &str, e: &NodeError) {
        tracing::warn!(wire, "reconcile: {}: {}", e.msg, e.details);
        self.failures
            .push(format!("{wire}: {}: {}", e.msg, e.details));
    }
}

/// One pass as it goes: its report, and the remote ends that need only their fast-path
/// port again (a restart), opened together at the end of the pass.
#[derive(Default)]
struct Pass {
    report: Reconciled,
    reattach: Vec<(WireRecord, LinkSpec)>,
    /// Pods with an end joined (or recorded pending) this pass: each tells the peers its
    /// ends once, at the end of the pass.
    announce: BTreeSet<(String, String)>,
}

/// What a pass looks at.
#[derive(Debug, Clone, Copy)]
pub(super) enum Scope<'a> {
    /// Every pod, and the node itself (a restart, the timer, `xwirectl reconcile`).
    Node,
    /// These attached pods only (ADD, CHECK, a topology change).
    Pods(&'a [AttachmentRecord]),
    /// A pod whose attachment goes (DEL): its wires go with it.
    Detached(&'a AttachmentRecord),
}

/// What `observe` found, with the namespaces it opened (for `apply`).
pub(super) struct Observation {
    pub(super) desired: Desired,
    pub(super) observed: Observed,
    pub(super) namespaces: HashMap<AttachmentKey, NetnsFd>,
    /// The pods looked at (every pod of the node, for a whole-node pass).
    pub(super) looked_at: HashSet<(String, String)>,
}

impl Node {
    /// Converges the node on its store: pods whose namespace is gone are forgotten (and
    /// their peers told), every attached pod's wire ends follow its topology, and what
    /// no record accounts for is removed. `observe`, then `plan::plan`, then `apply`.
    ///
    /// Only a namespace that is gone (nothing at its path, or not a network namespace)
    /// makes a pod forgotten; one that cannot be opened for any other reason (no file
    /// descriptors left, say) leaves the pod and its wires as they are, reported, for the
    /// next pass. An action that fails is reported, and the others go on.
    pub fn reconcile(&mut self) -> Result<Reconciled, NodeError> {
        let started = std::time::Instant::now();
        // A gateway's TUN device made again takes its routes with it: they come back here.
        self.sync_pool_routes();
        let done = self.pass(Scope::Node, &HashSet::new());
        self.metrics
            .observe_reconcile_pass(started.elapsed().as_secs_f64());
        done
    }

    /// One pass over `scope`: observe, plan, apply. `rebuild` names wire ends whose
    /// link changed (a topology apply), to be made anew.
    pub(super) fn pass(
        &mut self,
        scope: Scope<'_>,
        rebuild: &HashSet<EndKey>,
    ) -> Result<Reconciled, NodeError> {
        let mut observation = self.observe(scope)?;
        observation.desired.rebuild = rebuild.clone();
        let actions = plan(&observation.desired, &observation.observed);
        Ok(self.apply(actions, &observation))
    }

    /// Attaches a pod all or nothing (ADD): its attachment is recorded and its plan
    /// carried out with every step in `journal`, so that the caller can undo all of it
    /// when one fails.
    pub(super) fn attach(
        &mut self,
        attachment: &AttachmentRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        self.store.put_attachment(attachment)?;
        journal.record(Step::Attachment {
            key: attachment.key(),
        });
        let observation = self.observe(Scope::Pods(std::slice::from_ref(attachment)))?;
        for action in plan(&observation.desired, &observation.observed) {
            match action {
                Action::Join {
                    attachment,
                    uid,
                    half_made,
                    ..
                } => {
                    let end = self.end(
                        &observation.desired,
                        &observation.observed,
                        &observation.namespaces,
                        &attachment,
                        uid,
                    )?;
                    if !self.is_joined(end.pod, uid)? {
                        let made = Made::from_plan(half_made);
                        self.connect_end(end.pod, end.ns, end.link, made, journal)?;
                    }
                }
                other => {
                    let mut pass = Pass::default();
                    let subject = other.subject();
                    if let Err(e) = self.apply_one(other, &observation, &mut pass) {
                        pass.report.failed(&subject, &e);
                        return Err(e);
                    }
                    self.reattach_ports(&mut pass);
                }
            }
        }
        // The pod's impaired ends are impaired from their first frame.
        let steering = self.sync_steering(&observation.desired);
        let impairing = self.sync_impairments(&observation.looked_at);
        for failure in steering.into_iter().chain(impairing) {
            tracing::warn!("{failure}");
        }
        // Its routes, where its interfaces are up now (and those of a same-node peer
        // whose end this ADD made); one the kernel refuses is tried again by later passes.
        let mut routing = Reconciled::default();
        self.sync_pod_routing(
            &observation.desired,
            &observation.namespaces,
            false,
            &mut routing,
        );
        for failure in &routing.failures {
            tracing::warn!("{failure}");
        }
        Ok(())
    }

    /// Takes a pod's wires apart and drops its records, then its attachment (DEL, GC, a
    /// pod gone): a pass over the pod as detached. The first failure is returned, with
    /// the attachment kept, so that the next DEL or pass tries again.
    pub(super) fn detach(&mut self, attachment: &AttachmentRecord) -> Result<(), NodeError> {
        self.remove_pod_routing(attachment)?;
        step_times::time(step_times::NETLINK_POD_INTERFACES, || {
            remove_pods_interfaces_at_once(std::slice::from_ref(attachment))
        });
        let done = self.pass(Scope::Detached(attachment), &HashSet::new())?;
        if let Some(failure) = done.failures.first() {
            return Err(NodeError::new(
                ErrorKind::Interface,
                format!(
                    "pod {}/{}: its wires could not all be taken apart",
                    attachment.pod.namespace, attachment.pod.name
                ),
                failure.clone(),
            ));
        }
        self.store.remove_attachment(&attachment.key())?;
        Ok(())
    }

    /// Whether the end `uid` of the pod of `attachment` is joined (another action may
    /// have done it: a same-node veth is made from either end).
    fn is_joined(&self, attachment: &AttachmentRecord, uid: u64) -> Result<bool, NodeError> {
        let key = EndKey::new(&attachment.pod.namespace, &attachment.pod.name, uid);
        Ok(self
            .store
            .wire(&key)?
            .is_some_and(|w| w.state != WireState::Pending))
    }

    /// Gathers what should be and what is, as plain data: the attachments and their
    /// topologies' links, the wire records, the interfaces of each pod's namespace (and
    /// of the node's), the open fast-path ports and the far ends peers announced.
    pub(super) fn observe(&self, scope: Scope<'_>) -> Result<Observation, NodeError> {
        let mut desired = Desired::default();
        let mut observed = Observed {
            node_name: self.config.node_name.clone(),
            whole_node: matches!(scope, Scope::Node),
            ..Observed::default()
        };
        let mut namespaces = HashMap::new();
        let looked_at_pods =
            self.observe_pods(scope, &mut desired, &mut observed, &mut namespaces)?;
        let records = self.records_of(scope, &looked_at_pods)?;
        observed.records = records.into_iter().map(|w| (w.key(), w)).collect();
        let node_interfaces = match scope {
            Scope::Node => interfaces::observe(&self.node_ns),
            // Only the node ends of the pods looked at: one read each, rather than a dump
            // of a node namespace that may hold thousands.
            Scope::Pods(_) | Scope::Detached(_) => {
                self.node_ends_of(&desired, &observed, &looked_at_pods)
            }
        };
        match node_interfaces {
            Ok(interfaces) => observed.node_interfaces = interfaces,
            Err(e) => observed.node_unreadable = Some(format!("list its interfaces: {e}")),
        }
        if let Scope::Detached(attachment) = scope {
            observed.detached = Some(attachment.pod.clone());
        }
        self.observe_ports_and_far_ends(&mut desired, &mut observed);
        desired.withdrawn = self.withdrawn.clone();
        desired.switched = self.switched_wires(&desired);
        desired.bridged = self.bridged_wires(&desired);
        Ok(Observation {
            desired,
            observed,
            namespaces,
            looked_at: looked_at_pods,
        })
    }

    /// The attachments the pass plans with and their links (`desired`), and the
    /// namespaces of the pods it looks at, opened (`namespaces`) and listed
    /// (`observed`). Returns the pods looked at.
    fn observe_pods(
        &self,
        scope: Scope<'_>,
        desired: &mut Desired,
        observed: &mut Observed,
        namespaces: &mut HashMap<AttachmentKey, NetnsFd>,
    ) -> Result<HashSet<(String, String)>, NodeError> {
        let mut looked_at_pods = HashSet::new();
        // By container and interface, the parts of an attachment's key: a lookup per
        // attachment makes no key.
        let scope_keys: HashSet<(&str, &str)> = match scope {
            Scope::Pods(pods) => pods
                .iter()
                .map(|p| (p.container_id.as_str(), p.ifname.as_str()))
                .collect(),
            Scope::Node | Scope::Detached(_) => HashSet::new(),
        };
        let attachments = match scope {
            Scope::Node => self.store.attachments()?,
            Scope::Pods(pods) => self.attachments_and_peers(pods)?,
            // Nothing is planned for the attached pods; the detached pod's records go.
            Scope::Detached(_) => Vec::new(),
        };
        for attachment in attachments {
            let (namespace, name) = (&attachment.pod.namespace, &attachment.pod.name);
            let links = self
                .topology(namespace, name)?
                .map(|t| t.links.clone())
                .unwrap_or_default();
            let looked_at = match scope {
                Scope::Node => true,
                Scope::Pods(_) => scope_keys
                    .contains(&(attachment.container_id.as_str(), attachment.ifname.as_str())),
                Scope::Detached(_) => false,
            };
            if looked_at {
                looked_at_pods.insert((namespace.clone(), name.clone()));
                let seen = match attachment.open_netns() {
                    Ok(ns) => {
                        let seen = match interfaces::observe(&ns) {
                            Ok(interfaces) => PodNetns::Open(interfaces),
                            Err(e) => PodNetns::Unreadable(format!("list its interfaces: {e}")),
                        };
                        namespaces.insert(attachment.key(), ns);
                        seen
                    }
                    Err(e) if e.is_gone() => PodNetns::Gone,
                    Err(e) => PodNetns::Unreadable(e.to_string()),
                };
                observed.pods.insert(attachment.key(), seen);
            }
            desired.pods.push(DesiredPod { attachment, links });
        }
        Ok(looked_at_pods)
    }

    /// The wire records the pass plans with. A pass over some pods plans for theirs only
    /// (the others are taken as they are): it reads their records alone, not every record
    /// of a node that may hold thousands.
    fn records_of(
        &self,
        scope: Scope<'_>,
        looked_at_pods: &HashSet<(String, String)>,
    ) -> Result<Vec<WireRecord>, NodeError> {
        if let Scope::Node = scope {
            return Ok(self.store.wires()?);
        }
        let detached = match scope {
            Scope::Detached(attachment) => Some((&attachment.pod.namespace, &attachment.pod.name)),
            _ => None,
        };
        let mut records = Vec::new();
        for (namespace, pod) in looked_at_pods.iter().map(|(n, p)| (n, p)).chain(detached) {
            records.extend(self.store.wires_of_pod(namespace, pod)?);
        }
        Ok(records)
    }

    /// The open fast-path ports and the far ends peers announced, of the records the
    /// plan has only: a pass over some pods looks up the ports and far ends of their
    /// wires, rather than copying the node's thousands.
    fn observe_ports_and_far_ends(&self, desired: &mut Desired, observed: &mut Observed) {
        if observed.whole_node {
            observed.ports = self.ports.keys().cloned().collect();
            desired.remote_ends = self
                .remote_ends
                .iter()
                .map(|(key, end)| (key.clone(), end.pod.clone()))
                .collect();
            return;
        }
        for (key, record) in &observed.records {
            if self.ports.contains_key(key) {
                observed.ports.insert(key.clone());
            }
            let wire = record.wire();
            if let Some(end) = self.remote_ends.get(&wire) {
                desired.remote_ends.insert(wire, end.pod.clone());
            }
        }
    }

    /// The stored attachments of `pods`, and of the pods attached here that their links
    /// lead to, by key: what a pass over some pods plans with. The plan looks at the
    /// pods of a scoped pass alone, and at the others only as the far ends of those
    /// pods' links. Every attachment of the node, copied with its links at every ADD,
    /// made a lab's ADDs cost the square of its pods: `perf` during a 3,000-pod
    /// `lab up` found the node threads' time in copies, allocation and hashing.
    fn attachments_and_peers(
        &self,
        pods: &[AttachmentRecord],
    ) -> Result<Vec<AttachmentRecord>, NodeError> {
        let mut found = std::collections::BTreeMap::new();
        let mut peers_sought = HashSet::new();
        for pod in pods {
            let Some(stored) = self.store.attachment(&pod.key())? else {
                continue;
            };
            let (namespace, name) = (&stored.pod.namespace, &stored.pod.name);
            if let Some(topology) = self.topology(namespace, name)? {
                for link in topology.links.iter() {
                    if !peers_sought.insert((namespace.clone(), link.peer_pod.clone())) {
                        continue;
                    }
                    if let Some(peer) = self.store.attachment_of_pod(namespace, &link.peer_pod)? {
                        found.insert(peer.key(), peer);
                    }
                }
            }
            found.insert(stored.key(), stored);
        }
        Ok(found.into_values().collect())
    }

    /// The node-side interfaces that the remote records of `pods` name, and those of
    /// their unjoined ends whose pod interface xwire made (a half-made remote end's,
    /// see `Action::Join`).
    fn node_ends_of(
        &self,
        desired: &Desired,
        observed: &Observed,
        pods: &HashSet<(String, String)>,
    ) -> Result<Interfaces, crate::netns::NetnsError> {
        let mut found = Interfaces::new();
        for record in observed.records.values().filter(|r| {
            r.has_node_end() && pods.contains(&(r.topo_namespace.clone(), r.local_pod_name.clone()))
        }) {
            for name in node_side(record) {
                if let Some(state) = interfaces::inspect(&self.node_ns, &name)? {
                    found.insert(name, state);
                }
            }
        }
        for pod in &desired.pods {
            let Some(PodNetns::Open(in_pod)) = observed.pods.get(&pod.attachment.key()) else {
                continue;
            };
            let (namespace, name) = (&pod.attachment.pod.namespace, &pod.attachment.pod.name);
            for link in pod.links.iter() {
                let unjoined = observed
                    .records
                    .get(&EndKey::new(namespace, name, link.uid))
                    .is_none_or(|r| r.state == WireState::Pending);
                let ours = interfaces::pod_alias(namespace, name, link.uid);
                let made_here = in_pod
                    .get(&link.local_intf)
                    .is_some_and(|i| i.alias.as_deref() == Some(ours.as_str()));
                if unjoined && made_here {
                    let node_end = node_ifname(namespace, name, link.uid);
                    if let Some(state) = interfaces::inspect(&self.node_ns, &node_end)? {
                        found.insert(node_end, state);
                    }
                }
            }
        }
        Ok(found)
    }

    /// Carries out `actions` one at a time; one that fails is reported, and the rest go
    /// on (the next pass plans it again).
    fn apply(&mut self, actions: Vec<Action>, observation: &Observation) -> Reconciled {
        let mut pass = Pass::default();
        self.remove_node_ends_at_once(&actions, observation);
        for action in actions {
            let subject = action.subject();
            match self.apply_one(action, observation, &mut pass) {
                Ok(Some((subject, change))) => pass.report.changed(&subject, change),
                Ok(None) => {}
                Err(e) => pass.report.failed(&subject, &e),
            }
        }
        self.reattach_ports(&mut pass);
        for (namespace, pod) in std::mem::take(&mut pass.announce) {
            self.announce_pod(&namespace, &pod);
        }
        let steering = self.sync_steering(&observation.desired);
        let impairing = self.sync_impairments(&observation.looked_at);
        for failure in steering.into_iter().chain(impairing) {
            pass.report.failures.push(failure);
        }
        self.sync_pod_routing(
            &observation.desired,
            &observation.namespaces,
            !observation.observed.whole_node,
            &mut pass.report,
        );
        pass.report
    }

    /// Deletes the node ends of the remote wires that `actions` take apart (their far
    /// ends gone: a DEL storm on a peer) in one request, before the actions run: one
    /// request waits once for the kernel's RCU grace periods where one per end waits
    /// once per end, and an AF_XDP socket whose interface is gone closes at once. The
    /// actions then find the interfaces gone. Best effort: they delete what is left.
    fn remove_node_ends_at_once(&self, actions: &[Action], observation: &Observation) {
        let ends: Vec<(String, String)> = actions
            .iter()
            .filter_map(|action| match action {
                Action::Unjoin { key } | Action::RemoveWire { key, .. } => {
                    observation.observed.records.get(key)
                }
                _ => None,
            })
            .filter(|record| record.state == WireState::Remote && !record.wire_ifname.is_empty())
            .map(|record| {
                let alias = interfaces::node_alias(
                    &self.config.node_name,
                    &record.topo_namespace,
                    &record.local_pod_name,
                    record.link_uid,
                );
                (record.wire_ifname.clone(), alias)
            })
            .collect();
        if ends.len() > 1 {
            if let Err(e) = interfaces::delete_all(&self.node_ns, &ends) {
                tracing::debug!("deleting node ends at once: {e}");
            }
        }
    }

    /// One action; what it changed (and on what), if anything.
    fn apply_one(
        &mut self,
        action: Action,
        observation: &Observation,
        pass: &mut Pass,
    ) -> Result<Option<(String, String)>, NodeError> {
        let Observation {
            desired,
            observed,
            namespaces,
            ..
        } = observation;
        let record = |key: &EndKey| record_of(observed, key);
        match action {
            Action::ForgetPod { attachment } => {
                let pod = pod_of(desired, &attachment)?;
                self.detach(&pod.attachment)?;
                let what = "the pod's namespace is gone: forgotten";
                Ok(change(pod_label(&pod.attachment), what))
            }
            Action::Unreachable { reason, .. } => Err(unreachable_pod(reason)),
            Action::RemoveWire { key, why } => {
                self.disconnect_end(&record(&key)?, true);
                self.store.remove_wire(&key)?;
                Ok(change(key, why))
            }
            Action::Join {
                attachment,
                uid,
                why,
                half_made,
            } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                if self.is_joined(end.pod, uid)? {
                    return Ok(None);
                }
                self.join_end(end, Made::from_plan(half_made), why, pass)
            }
            Action::RemakeVeth { attachment, uid } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                self.set_pending(record(&end.key)?);
                self.join_end(end, Made::Not, "veth gone: made again", pass)
            }
            Action::Unjoin { key } => {
                let record = record(&key)?;
                tracing::info!(wire = %key, peer = ?record.peer_node, "far end gone");
                self.disconnect_end(&record, false);
                self.set_pending(record);
                Ok(change(key, "far end gone: back to pending"))
            }
            Action::Rebuild { attachment, uid } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                let made = record(&end.key)?;
                // A VXLAN end moving on or off the switch's bridge keeps its tunnel's VNI
                // and far end: the far end's node has nothing to do.
                let stays_vxlan =
                    made.state == WireState::Vxlan && end.link.carrier == Some(Carrier::Vxlan);
                self.disconnect_end(&made, !stays_vxlan);
                self.store.remove_wire(&end.key)?;
                self.join_end(end, Made::Not, "made anew for its changed link", pass)
            }
            Action::Reattach { attachment, uid } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                let record = record(&end.key)?;
                if record.state == WireState::Switched {
                    self.reopen_switched(&record, end.link)?;
                    return Ok(change(end.key, "re-attached to its interfaces"));
                }
                if record.state == WireState::Vxlan {
                    self.reopen_bridged(&record, end.link)?;
                    return Ok(change(end.key, "re-attached to its interfaces"));
                }
                pass.reattach.push((record, end.link.clone()));
                Ok(None)
            }
            Action::RepairRemote { attachment, uid } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                let what =
                    self.repair_remote(end.ns, end.link, record(&end.key)?, end.interfaces)?;
                Ok(change(end.key, what))
            }
            Action::Foreign { key, ifname, alias } => {
                Err(foreign_interface(&key, &ifname, alias.as_deref()))
            }
            Action::Configure {
                attachment,
                uid,
                differs,
            } => {
                let end = self.end(desired, observed, namespaces, &attachment, uid)?;
                configure_end(&end, &differs)
            }
            Action::ClosePort { key } => {
                self.close_port(&key);
                Ok(change(key, "fast-path port with no wire: closed"))
            }
            Action::RemoveNodeInterface { name, alias } => {
                interfaces::delete(&self.node_ns, &name, &alias).map_err(|e| {
                    NodeError::new(
                        ErrorKind::Interface,
                        "remove a stray interface",
                        e.to_string(),
                    )
                })?;
                Ok(change(name, "node interface with no wire: removed"))
            }
        }
    }

    /// Joins `end`'s wire (see `join`), and notes its pod for the announcement that
    /// follows the pass.
    fn join_end(
        &mut self,
        end: PlannedEnd<'_>,
        made: Made,
        why: &'static str,
        pass: &mut Pass,
    ) -> Result<Option<(String, String)>, NodeError> {
        let change = self.join(end.pod, end.ns, end.link, end.interfaces, made, why)?;
        pass.announce.insert(pod_name(end.pod));
        Ok(change.map(|c| (end.key.to_string(), c.into())))
    }

    /// Closes the fast-path port of wire record `key`, if it has one.
    fn close_port(&mut self, key: &EndKey) {
        if let Some(port) = self.ports.remove(key) {
            if let Some(fastpath) = &self.fastpath {
                let wire = port.wire_id;
                step_times::time(step_times::PORT_CLOSE, || {
                    let _ = fastpath.worker_of(wire).remove_port(port.id);
                });
            }
        }
    }

    /// One end of an action: its pod's attachment, namespace and interfaces, and link.
    fn end<'a>(
        &self,
        desired: &'a Desired,
        observed: &'a Observed,
        namespaces: &'a HashMap<AttachmentKey, NetnsFd>,
        attachment: &AttachmentKey,
        uid: u64,
    ) -> Result<PlannedEnd<'a>, NodeError> {
        let pod = pod_of(desired, attachment)?;
        let missing = || {
            NodeError::new(
                ErrorKind::Store,
                format!("{attachment}: nothing observed"),
                "",
            )
        };
        let link = pod
            .links
            .iter()
            .find(|l| l.uid == uid)
            .ok_or_else(missing)?;
        let ns = namespaces.get(attachment).ok_or_else(missing)?;
        let Some(PodNetns::Open(interfaces)) = observed.pods.get(attachment) else {
            return Err(missing());
        };
        Ok(PlannedEnd {
            key: EndKey::new(&pod.attachment.pod.namespace, &pod.attachment.pod.name, uid),
            pod: &pod.attachment,
            ns,
            link,
            interfaces,
        })
    }

    /// Opens the ports of the remote ends found with both interfaces in place, all in
    /// one batch: the worker opens each while this thread waits for them all, instead
    /// of the two threads taking turns for each port (at a restart of a node with 1000
    /// remote wires, that halved the time the two spent waiting on each other).
    fn reattach_ports(&mut self, pass: &mut Pass) {
        let mut records = Vec::new();
        let mut specs = Vec::new();
        for (record, link) in std::mem::take(&mut pass.reattach) {
            match self.remote_port(&record, &link) {
                Ok(spec) => {
                    records.push(record);
                    specs.push(spec);
                }
                Err(e) => pass.report.failed(record.key().as_str(), &e),
            }
        }
        let Some(fastpath) = &self.fastpath else {
            return; // `remote_port` refused every end: there are no peers.
        };
        let opened = fastpath.add_remote_ports(&specs);
        for ((record, spec), opened) in records.iter().zip(&specs).zip(opened) {
            // Nothing to undo on failure: a port that could not join was closed again.
            let mut journal = Journal::default();
            match self.adopt_remote_port(record, spec, opened, &mut journal) {
                Ok(()) => pass
                    .report
                    .changed(record.key().as_str(), "re-attached to its interfaces"),
                Err(e) => pass.report.failed(record.key().as_str(), &e),
            }
        }
    }

    /// Joins one end as far as is possible now. A half-made remote end is taken as it
    /// is; otherwise an interface of the end's name that xwire made for this very end (a
    /// start interrupted before its record was written) is removed first, and anyone
    /// else's is left, and the join fails.
    fn join(
        &mut self,
        attachment: &AttachmentRecord,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        pod_interfaces: &Interfaces,
        made: Made,
        what: &'static str,
    ) -> Result<Option<&'static str>, NodeError> {
        let ours = interfaces::pod_alias(&attachment.pod.namespace, &attachment.pod.name, link.uid);
        if made == Made::Not
            && pod_interfaces
                .get(&link.local_intf)
                .is_some_and(|i| i.alias.as_deref() == Some(&ours))
        {
            log_removal(
                interfaces::delete(pod_ns, &link.local_intf, &ours),
                &link.local_intf,
            );
        }
        let mut journal = Journal::default();
        match self.connect_end(attachment, pod_ns, link, made, &mut journal) {
            Ok(()) => {
                let key = EndKey::new(&attachment.pod.namespace, &attachment.pod.name, link.uid);
                let pending = self
                    .store
                    .wire(&key)?
                    .is_none_or(|w| w.state == WireState::Pending);
                if pending {
                    Ok(Some("recorded, waiting for its far end"))
                } else {
                    Ok(Some(what))
                }
            }
            Err(e) => {
                self.rollback(journal);
                Err(e)
            }
        }
    }

    /// A remote end with either of its interfaces gone is made again (the plan has
    /// checked that an interface of its name in the pod is xwire's).
    fn repair_remote(
        &mut self,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        record: WireRecord,
        pod_interfaces: &Interfaces,
    ) -> Result<&'static str, NodeError> {
        let ours = interfaces::pod_alias(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        );
        let in_pod = pod_interfaces.contains_key(&record.local_pod_ifname);
        let mut journal = Journal::default();
        // Half a veth cannot be: what is left of it is taken away with the rest.
        self.disconnect_end(&record, false);
        if in_pod {
            log_removal(
                interfaces::delete(pod_ns, &record.local_pod_ifname, &ours),
                &record.local_pod_ifname,
            );
        }
        let node = record.peer_node.clone().unwrap_or_default();
        let mut rebuilt = record.clone();
        let result = self
            .connect_far(pod_ns, link, &node, Made::Not, &mut rebuilt, &mut journal)
            .and_then(|()| self.write_wire(&rebuilt).map(drop));
        match result {
            Ok(()) => Ok("an interface was gone: made again"),
            Err(e) => {
                self.rollback(journal);
                self.set_pending(record);
                Err(e)
            }
        }
    }
}

/// How a pass's report names a pod: `namespace/name`.
fn pod_label(attachment: &AttachmentRecord) -> String {
    format!("{}/{}", attachment.pod.namespace, attachment.pod.name)
}

fn pod_name(attachment: &AttachmentRecord) -> (String, String) {
    (
        attachment.pod.namespace.clone(),
        attachment.pod.name.clone(),
    )
}

/// The attached pod of an action.
fn pod_of<'a>(
    desired: &'a Desired,
    attachment: &AttachmentKey,
) -> Result<&'a DesiredPod, NodeError> {
    desired
        .pods
        .iter()
        .find(|p| p.attachment.has_key(attachment))
        .ok_or_else(|| NodeError::new(ErrorKind::Store, format!("no attachment {attachment}"), ""))
}

/// A change a pass reports: what it was about, and what was done.
fn change(subject: impl std::fmt::Display, what: impl Into<String>) -> Option<(String, String)> {
    Some((subject.to_string(), what.into()))
}

/// The wire record `key` as observed.
fn record_of(observed: &Observed, key: &EndKey) -> Result<WireRecord, NodeError> {
    (observed.records.get(key).cloned())
        .ok_or_else(|| NodeError::new(ErrorKind::Store, format!("no record {key}"), ""))
}

/// Why a pod whose namespace cannot be opened keeps its wires as they are.
fn unreachable_pod(reason: String) -> NodeError {
    NodeError::new(
        ErrorKind::Interface,
        "its namespace cannot be opened now; its wires are left as they are",
        reason,
    )
}

/// Why a wire whose pod has an interface of its name that xwire did not make is left
/// alone.
fn foreign_interface(key: &EndKey, ifname: &str, alias: Option<&str>) -> NodeError {
    NodeError::new(
        ErrorKind::InterfaceExists,
        format!(
            "the pod of wire {key} has an interface {ifname} that xwire did not make: \
             the wire is not made again"
        ),
        format!("its alias is {alias:?}"),
    )
}

/// Sets `end`'s pod interface as its link says, where it `differs` (an address missing,
/// say): only what is missing is added.
fn configure_end(
    end: &PlannedEnd<'_>,
    differs: &[String],
) -> Result<Option<(String, String)>, NodeError> {
    let own = own_end(&end.pod.pod.namespace, &end.pod.pod.name, end.link);
    let present = end
        .interfaces
        .get(&own.name)
        .map(|i| i.addresses.clone())
        .unwrap_or_default();
    let settings = EndSettings {
        // Only what is missing is added; the alias is the end's already.
        address: own.address.filter(|a| !present.contains(a)),
        alias: None,
        ..own
    };
    interfaces::configure(end.ns, &settings).map_err(|e| {
        NodeError::new(
            ErrorKind::Interface,
            format!("configure {}", settings.name),
            e.to_string(),
        )
    })?;
    let change = format!("set as the topology says ({})", differs.join("; "));
    Ok(Some((end.key.to_string(), change)))
}

/// An end an action works on, as observed.
struct PlannedEnd<'a> {
    /// Its wire record's key.
    key: EndKey,
    pod: &'a AttachmentRecord,
    ns: &'a NetnsFd,
    link: &'a LinkSpec,
    interfaces: &'a Interfaces,
}

/// Deletes the pods' xwire interfaces before the passes that take their wires apart:
/// each pod's in one request, the pods' on a thread each. Deleting a veth waits for the
/// kernel's RCU grace periods (and, for a remote wire's, for its node end's AF_XDP
/// socket); one request for a pod's interfaces waits once for all of them, and the pods'
/// requests wait side by side (DELs that queued together). The passes then find them
/// gone. Best effort: whatever is left, a pass removes as before.
pub(super) fn remove_pods_interfaces_at_once(attachments: &[AttachmentRecord]) {
    // At most this many pods at once.
    const AT_ONCE: usize = 32;
    for group in attachments.chunks(AT_ONCE) {
        std::thread::scope(|scope| {
            for attachment in group {
                scope.spawn(move || {
                    if let Err(e) = remove_pod_interfaces(attachment) {
                        tracing::debug!(pod = %pod_label(attachment), "deleting at once: {e}");
                    }
                });
            }
        });
    }
}

/// Deletes the xwire interfaces of one pod, in one batch.
fn remove_pod_interfaces(attachment: &AttachmentRecord) -> Result<(), NetnsError> {
    let ns = attachment.open_netns()?;
    let prefix = interfaces::pod_alias_prefix(&attachment.pod.namespace, &attachment.pod.name);
    let ours: Vec<(String, String)> = interfaces::aliases(&ns)?
        .into_iter()
        .filter_map(|(name, alias)| Some((name, alias.filter(|a| a.starts_with(&prefix))?)))
        .collect();
    if !ours.is_empty() {
        interfaces::delete_all(&ns, &ours)?;
    }
    Ok(())
}
