//! A pass's actions carried out: one `apply` for every kind of action, for a pass (each
//! failure reported, the rest going on) and for an ADD (all or nothing, in a journal).

use std::collections::BTreeSet;

use super::peers::PeerTalk;
use super::plan::{Action, Interfaces};
use super::planned_end::{configure_end, planned_end, pod_of, record_of, PlannedEnd};
use super::reconcile::{Observation, OnFailure, Reconciled};
use super::wiring::{log_removal, Made, Wiring};
use super::{
    DataPlane, ErrorKind, Journal, Namespaces, Node, NodeError, PeerBook, Records, Routing,
};
use crate::config::DaemonConfig;
use crate::interfaces;
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;
use xwire_proto::control::Carrier;

/// One pass as it goes: its report, and the remote ends that need only their fast-path
/// port again (a restart), opened together at the end of the pass.
#[derive(Default)]
struct Pass {
    report: Reconciled,
    reattach: Vec<(WireRecord, LinkSpec)>,
    /// Pods with an end joined (or recorded pending) this pass: each tells the peers its
    /// ends once, at the end of the pass.
    announce: BTreeSet<(String, String)>,
    /// A pod whose namespace is gone, and how the report names it: handed back to the
    /// node, which detaches it (a pass of its own) before the next action.
    forget: Option<(String, AttachmentRecord)>,
}

/// What carrying out a pass's actions works on, borrowed from the node: every part but
/// its metrics. It makes and unmakes wire ends (`Wiring`), tells peers (`PeerTalk`),
/// steers, impairs and routes; a pod to forget it hands back to the node, whose pass
/// that is (`Node::apply`).
pub(super) struct Applying<'a> {
    config: &'a DaemonConfig,
    records: &'a mut Records,
    data: &'a mut DataPlane,
    peers: &'a mut PeerBook,
    netns: &'a Namespaces,
    routing: &'a mut Routing,
}

impl Node {
    /// Carries out `actions` one at a time, every kind of action, for a pass and for an
    /// ADD alike; `on_failure` says what an action that fails does to the others. A pod
    /// whose namespace is gone is detached where its action comes, in a pass of its own,
    /// so that the actions after it find its wires gone.
    pub(super) fn apply(
        &mut self,
        actions: Vec<Action>,
        observation: &Observation,
        mut on_failure: OnFailure<'_>,
    ) -> Result<Reconciled, NodeError> {
        let stops = matches!(on_failure, OnFailure::Stop(_));
        let mut pass = Pass::default();
        if !stops {
            Applying::of(self).remove_node_ends_at_once(&actions, observation);
        }
        let mut actions = actions.into_iter();
        while let Some((subject, attachment)) =
            Applying::of(self).run(&mut actions, observation, &mut on_failure, &mut pass)?
        {
            match self.detach(&attachment) {
                Ok(()) => pass
                    .report
                    .changed(&subject, "the pod's namespace is gone: forgotten"),
                Err(e) if stops => return Err(e),
                Err(e) => pass.report.failed(&subject, &e),
            }
        }
        let mut applying = Applying::of(self);
        applying.reattach_ports(&mut pass);
        // An ADD's pod is announced by the call, once it is all done.
        if !stops {
            for (namespace, pod) in std::mem::take(&mut pass.announce) {
                applying.peer_talk().announce_pod(&namespace, &pod);
            }
        }
        Ok(pass.report)
    }
}

impl<'a> Applying<'a> {
    /// The node's parts, borrowed to carry out actions.
    fn of(node: &'a mut Node) -> Applying<'a> {
        Applying {
            config: &node.config,
            records: &mut node.records,
            data: &mut node.data,
            peers: &mut node.peers,
            netns: &node.netns,
            routing: &mut node.routing,
        }
    }
}

impl Applying<'_> {
    /// What making and unmaking a wire end needs, borrowed from these parts.
    fn wiring(&mut self) -> Wiring<'_> {
        Wiring::new(self.config, self.records, self.data, self.netns, self.peers)
    }

    fn peer_talk(&mut self) -> PeerTalk<'_> {
        PeerTalk::new(self.config, self.records, self.data, self.peers, self.netns)
    }

    /// Carries out `actions` (see `Node::apply`) up to a pod to forget, which it hands
    /// back; `None` when they are all done.
    fn run(
        &mut self,
        actions: &mut impl Iterator<Item = Action>,
        observation: &Observation,
        on_failure: &mut OnFailure<'_>,
        pass: &mut Pass,
    ) -> Result<Option<(String, AttachmentRecord)>, NodeError> {
        for action in actions {
            let subject = action.subject();
            let done = match (&mut *on_failure, action) {
                (
                    OnFailure::Stop(journal),
                    Action::Join {
                        attachment,
                        uid,
                        half_made,
                        ..
                    },
                ) => self.join_journalled(observation, &attachment, uid, half_made, journal),
                (_, action) => self.apply_one(action, observation, pass),
            };
            match done {
                Ok(Some((subject, change))) => pass.report.changed(&subject, change),
                Ok(None) => {}
                Err(e) => {
                    pass.report.failed(&subject, &e);
                    if let OnFailure::Stop(_) = on_failure {
                        return Err(e);
                    }
                }
            }
            if let Some(forget) = pass.forget.take() {
                return Ok(Some(forget));
            }
        }
        Ok(None)
    }

    /// Joins an end for an ADD, every step in `journal` (see `Action::Join`).
    fn join_journalled(
        &mut self,
        observation: &Observation,
        attachment: &AttachmentKey,
        uid: u64,
        half_made: bool,
        journal: &mut Journal,
    ) -> Result<Option<(String, String)>, NodeError> {
        let end = planned_end(observation, attachment, uid)?;
        if !self.records.is_joined(end.pod, uid)? {
            let made = Made::from_plan(half_made);
            self.wiring()
                .connect_end(end.pod, end.ns, end.link, made, journal)?;
        }
        Ok(None)
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
            if let Err(e) = interfaces::delete_all(&self.netns.node_ns, &ends) {
                tracing::debug!("deleting node ends at once: {e}");
            }
        }
    }

    /// One action; what it changed (and on what), if anything. Over 100 lines for a
    /// reason: one short arm per kind of action, so that every kind is carried out in
    /// one place, next to the others.
    fn apply_one(
        &mut self,
        action: Action,
        observation: &Observation,
        pass: &mut Pass,
    ) -> Result<Option<(String, String)>, NodeError> {
        let Observation {
            desired, observed, ..
        } = observation;
        let record = |key: &EndKey| record_of(observed, key);
        let subject = action.subject();
        match action {
            Action::ForgetPod { attachment } => {
                let pod = pod_of(desired, &attachment)?;
                pass.forget = Some((pod_label(&pod.attachment), pod.attachment.clone()));
                Ok(None)
            }
            Action::Unreachable { reason, .. } => Err(unreachable_pod(reason)),
            Action::RemoveWire { key, why } => {
                self.wiring().disconnect_end(&record(&key)?, true);
                self.records.store.remove_wire(&key)?;
                Ok(change(key, why))
            }
            Action::Join {
                attachment,
                uid,
                why,
                half_made,
            } => {
                let end = planned_end(observation, &attachment, uid)?;
                if self.records.is_joined(end.pod, uid)? {
                    return Ok(None);
                }
                self.join_end(end, Made::from_plan(half_made), why, pass)
            }
            Action::RemakeVeth { attachment, uid } => {
                let end = planned_end(observation, &attachment, uid)?;
                self.records.set_pending(record(&end.key)?);
                self.join_end(end, Made::Not, "veth gone: made again", pass)
            }
            Action::Unjoin { key } => {
                let record = record(&key)?;
                tracing::info!(wire = %key, peer = ?record.peer_node, "far end gone");
                self.wiring().disconnect_end(&record, false);
                self.records.set_pending(record);
                Ok(change(key, "far end gone: back to pending"))
            }
            Action::Rebuild { attachment, uid } => {
                let end = planned_end(observation, &attachment, uid)?;
                let made = record(&end.key)?;
                // A VXLAN end moving on or off the switch's bridge keeps its tunnel's VNI
                // and far end: the far end's node has nothing to do.
                let stays_vxlan =
                    made.state == WireState::Vxlan && end.link.carrier == Some(Carrier::Vxlan);
                self.wiring().disconnect_end(&made, !stays_vxlan);
                self.records.store.remove_wire(&end.key)?;
                self.join_end(end, Made::Not, "made anew for its changed link", pass)
            }
            Action::Reattach { attachment, uid } => {
                let end = planned_end(observation, &attachment, uid)?;
                let record = record(&end.key)?;
                if record.state == WireState::Switched {
                    self.wiring().reopen_switched(&record, end.link)?;
                    return Ok(change(end.key, "re-attached to its interfaces"));
                }
                if record.state == WireState::Vxlan {
                    self.wiring().reopen_bridged(&record, end.link)?;
                    return Ok(change(end.key, "re-attached to its interfaces"));
                }
                pass.reattach.push((record, end.link.clone()));
                Ok(None)
            }
            Action::RepairRemote { attachment, uid } => {
                let end = planned_end(observation, &attachment, uid)?;
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
                let end = planned_end(observation, &attachment, uid)?;
                configure_end(&end, &differs)
            }
            Action::ClosePort { key } => {
                self.data.close_port(&key);
                Ok(change(key, "fast-path port with no wire: closed"))
            }
            Action::RemoveNodeInterface { name, alias } => {
                interfaces::delete(&self.netns.node_ns, &name, &alias).map_err(|e| {
                    NodeError::new(
                        ErrorKind::Interface,
                        "remove a stray interface",
                        e.to_string(),
                    )
                })?;
                Ok(change(name, "node interface with no wire: removed"))
            }
            Action::Steer {
                wire,
                pods,
                max_frame,
            } => {
                let records = [&pods[0], &pods[1]].map(|pod| {
                    let key = EndKey::new(&wire.namespace, pod, wire.link_uid);
                    self.records.store.wire(&key)?.ok_or_else(|| {
                        NodeError::new(ErrorKind::Store, format!("no wire record {key}"), "")
                    })
                });
                let [own, peer] = records;
                self.data.steer(&wire, [own?, peer?], max_frame)?;
                Ok(change(subject, "steered through the switch"))
            }
            Action::Unsteer { wire, .. } => {
                self.data.unsteer(&wire);
                Ok(change(subject, "back to a straight veth"))
            }
            Action::Impair { key, impairment } => self.data.impair(&key, impairment),
            Action::PoolRoutes { .. } => {
                self.routing.sync_pool_routes(&self.netns.node_ns);
                Ok(change(subject, "set as the pools ask"))
            }
            Action::Route {
                attachment, pod, ..
            } => {
                self.records
                    .route(observation, &attachment, &pod, &mut pass.report)?;
                Ok(None)
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

    /// Opens the ports of the remote ends found with both interfaces in place, all in
    /// one batch: the worker opens each while this thread waits for them all, instead
    /// of the two threads taking turns for each port (at a restart of a node with 1000
    /// remote wires, that halved the time the two spent waiting on each other).
    fn reattach_ports(&mut self, pass: &mut Pass) {
        let mut records = Vec::new();
        let mut specs = Vec::new();
        for (record, link) in std::mem::take(&mut pass.reattach) {
            match self.wiring().remote_port(&record, &link) {
                Ok(spec) => {
                    records.push(record);
                    specs.push(spec);
                }
                Err(e) => pass.report.failed(record.key().as_str(), &e),
            }
        }
        let Some(fastpath) = &self.data.fastpath else {
            return; // `remote_port` refused every end: there are no peers.
        };
        let opened = fastpath.add_remote_ports(&specs);
        for ((record, spec), opened) in records.iter().zip(&specs).zip(opened) {
            // Nothing to undo on failure: a port that could not join was closed again.
            let mut journal = Journal::default();
            match self
                .data
                .adopt_remote_port(record, spec, opened, &mut journal)
            {
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
        match self
            .wiring()
            .connect_end(attachment, pod_ns, link, made, &mut journal)
        {
            Ok(()) => {
                let key = EndKey::new(&attachment.pod.namespace, &attachment.pod.name, link.uid);
                let pending = self
                    .records
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
                self.wiring().rollback(journal);
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
        self.wiring().disconnect_end(&record, false);
        if in_pod {
            log_removal(
                interfaces::delete(pod_ns, &record.local_pod_ifname, &ours),
                &record.local_pod_ifname,
            );
        }
        let node = record.peer_node.clone().unwrap_or_default();
        let mut rebuilt = record.clone();
        let result = self
            .wiring()
            .connect_far(pod_ns, link, &node, Made::Not, &mut rebuilt, &mut journal)
            .and_then(|()| self.records.write_wire(&rebuilt).map(drop));
        match result {
            Ok(()) => Ok("an interface was gone: made again"),
            Err(e) => {
                self.wiring().rollback(journal);
                self.records.set_pending(record);
                Err(e)
            }
        }
    }
}

/// How a pass's report names a pod: `namespace/name`.
pub(super) fn pod_label(attachment: &AttachmentRecord) -> String {
    format!("{}/{}", attachment.pod.namespace, attachment.pod.name)
}

fn pod_name(attachment: &AttachmentRecord) -> (String, String) {
    (
        attachment.pod.namespace.clone(),
        attachment.pod.name.clone(),
    )
}

/// A change a pass reports: what it was about, and what was done.
fn change(subject: impl std::fmt::Display, what: impl Into<String>) -> Option<(String, String)> {
    Some((subject.to_string(), what.into()))
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

impl super::DataPlane {
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
}

impl super::Records {
    /// Whether the end `uid` of the pod of `attachment` is joined (another action may
    /// have done it: a same-node veth is made from either end).
    fn is_joined(&self, attachment: &AttachmentRecord, uid: u64) -> Result<bool, NodeError> {
        let key = EndKey::new(&attachment.pod.namespace, &attachment.pod.name, uid);
        Ok(self
            .store
            .wire(&key)?
            .is_some_and(|w| w.state != WireState::Pending))
    }
}
