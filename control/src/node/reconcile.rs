//! Reconciliation: one idempotent pass that brings what exists on the node (pod and node
//! interfaces, fast-path ports and links) to what the store and the topologies say, and
//! lists each change it made. It is what a start after a crash runs (it re-attaches to
//! the interfaces a previous run made, never recreating one that exists), and it runs
//! again whenever the node is idle after events, and on a timer. A second pass over an
//! unchanged node changes nothing.

use std::collections::{HashMap, HashSet};

use super::apply::pod_label;
use super::plan::{self, Desired, Observed};
use super::{ErrorKind, Journal, Node, NodeError, Step};
use crate::interfaces;
use crate::netns::{NetnsError, NetnsFd};
use crate::step_times;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey};

/// What one pass did: the changes it made and the ones it could not make.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reconciled {
    pub changes: Vec<String>,
    pub failures: Vec<String>,
}

impl Reconciled {
    pub(super) fn changed(&mut self, wire: &str, what: impl std::fmt::Display) {
        tracing::info!(wire, "reconcile: {what}");
        self.changes.push(format!("{wire}: {what}"));
    }

    pub(super) fn failed(&mut self, wire: &str, e: &NodeError) {
        tracing::warn!(wire, "reconcile: {}: {}", e.msg, e.details);
        self.failures
            .push(format!("{wire}: {}: {}", e.msg, e.details));
    }

    pub(super) fn merge(&mut self, other: Reconciled) {
        self.changes.extend(other.changes);
        self.failures.extend(other.failures);
    }
}

/// What `apply` does when an action fails.
pub(super) enum OnFailure<'j> {
    /// A pass: the failure is reported, the other actions go on, and the next pass plans
    /// it again.
    GoOn,
    /// An ADD: all or nothing. Every join's steps go in the journal, for the caller to
    /// undo when one fails, and the first failure ends the apply.
    Stop(&'j mut Journal),
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

/// What `observe` found, with the namespaces it opened (for `apply`). Empty, it is a
/// settings stage about no pod: the steered and captured wires alone.
#[derive(Default)]
pub(super) struct Observation {
    pub(super) desired: Desired,
    pub(super) observed: Observed,
    pub(super) namespaces: HashMap<AttachmentKey, NetnsFd>,
    /// What could not be observed for the settings stage (`settings.rs`), one line each.
    pub(super) failures: Vec<String>,
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
        let mut observation = self.observer().observe(scope)?;
        observation.desired.rebuild = rebuild.clone();
        let actions = plan::wires(&observation.desired, &observation.observed);
        let mut report = self.apply(actions, &observation, OnFailure::GoOn)?;
        let clear_stale = !observation.observed.whole_node;
        report.merge(self.settle(&mut observation, clear_stale));
        Ok(report)
    }

    /// Attaches a pod all or nothing (ADD): its attachment is recorded and its plan
    /// carried out with every step in `journal`, so that the caller can undo all of it
    /// when one fails.
    pub(super) fn attach(
        &mut self,
        attachment: &AttachmentRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        self.records.store.put_attachment(attachment)?;
        journal.record(Step::Attachment {
            key: attachment.key(),
        });
        let mut observation = self
            .observer()
            .observe(Scope::Pods(std::slice::from_ref(attachment)))?;
        let actions = plan::wires(&observation.desired, &observation.observed);
        self.apply(actions, &observation, OnFailure::Stop(journal))?;
        // The pod's impaired ends are impaired from their first frame, and it has its
        // routes where its interfaces are up now (and those of a same-node peer whose end
        // this ADD made). What fails here is tried again by later passes.
        for failure in self.settle(&mut observation, false).failures {
            tracing::warn!("{failure}");
        }
        Ok(())
    }

    /// Takes a pod's wires apart and drops its records, then its attachment (DEL, GC, a
    /// pod gone): a pass over the pod as detached. The first failure is returned, with
    /// the attachment kept, so that the next DEL or pass tries again.
    pub(super) fn detach(&mut self, attachment: &AttachmentRecord) -> Result<(), NodeError> {
        self.routing.remove_pod_routing(attachment)?;
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
        self.records.store.remove_attachment(&attachment.key())?;
        Ok(())
    }
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
