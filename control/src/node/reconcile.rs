//! Reconciliation: one idempotent pass that brings what exists on the node (pod and node
//! interfaces, fast-path ports and links) to what the store and the topologies say, and
//! lists each change it made. It is what a start after a crash runs (it re-attaches to
//! the interfaces a previous run made, never recreating one that exists), and it runs
//! again whenever the node is idle after events, and on a timer. A second pass over an
//! unchanged node changes nothing.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use xwire_proto::control::WireKey;
use xwire_proto::local::{codes, CniError};

use super::wiring::log_removal;
use super::{cni_error, store_error, Journal, Node};
use crate::interfaces::{self, NODE_ALIAS_PREFIX};
use crate::netns::NetnsFd;
use crate::store::{wire_key, AttachmentRecord, WireRecord, WireState};
use crate::topology::Link;

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

    fn failed(&mut self, wire: &str, e: &CniError) {
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
    reattach: Vec<(WireRecord, Link)>,
}

/// Interface names (and aliases) of one namespace, read once per pass.
type Interfaces = HashMap<String, Option<String>>;

/// A pod by topology namespace and name.
type PodName = (String, String);

impl Node {
    /// Converges the node on its store: pods whose namespace is gone are forgotten (and
    /// their peers told), every attached pod's wire ends follow its topology, and what
    /// no record accounts for is removed.
    ///
    /// Only a namespace that is gone (nothing at its path, or not a network namespace)
    /// makes a pod forgotten; one that cannot be opened for any other reason (no file
    /// descriptors left, say) leaves the pod and its wires as they are, reported, for the
    /// next pass. A pod whose reconciliation fails is reported, and the others go on.
    pub fn reconcile(&mut self) -> Result<Reconciled, CniError> {
        let mut pass = Pass::default();
        let attachments = self.store.attachments().map_err(store_error)?;
        let mut alive = Vec::new();
        // Pods whose wires stay: those reconciled and those that could not be looked at.
        let mut kept: HashSet<PodName> = HashSet::new();
        for attachment in attachments {
            let pod = pod_label(&attachment);
            match NetnsFd::open(Path::new(&attachment.netns)) {
                Ok(ns) => {
                    kept.insert(pod_name(&attachment));
                    alive.push((attachment, ns));
                }
                Err(e) if e.is_gone() => match self.forget_attachment(&attachment, true) {
                    Ok(()) => pass
                        .report
                        .changed(&pod, "the pod's namespace is gone: forgotten"),
                    Err(e) => pass.report.failed(&pod, &e),
                },
                Err(e) => {
                    kept.insert(pod_name(&attachment));
                    pass.report.failed(
                        &pod,
                        &cni_error(
                            codes::INTERFACE_FAILED,
                            "the pod's namespace cannot be opened now; its wires are left as they are",
                            e.to_string(),
                        ),
                    );
                }
            }
        }
        let mut node_interfaces = self.node_interfaces()?;
        // One read of every record, rather than one per pod.
        let mut wires_by_pod: HashMap<(String, String), Vec<WireRecord>> = HashMap::new();
        for wire in self.store.wires().map_err(store_error)? {
            wires_by_pod
                .entry((wire.topo_namespace.clone(), wire.local_pod_name.clone()))
                .or_default()
                .push(wire);
        }
        for (attachment, pod_ns) in &alive {
            let wires = wires_by_pod
                .remove(&pod_name(attachment))
                .unwrap_or_default();
            let reconciled = interfaces::aliases(pod_ns)
                .map_err(|e| {
                    cni_error(
                        codes::INTERFACE_FAILED,
                        format!("list pod {}'s interfaces", attachment.pod.name),
                        e.to_string(),
                    )
                })
                .and_then(|pod_interfaces| {
                    self.reconcile_pod(
                        attachment,
                        pod_ns,
                        wires,
                        &pod_interfaces,
                        &node_interfaces,
                        &mut pass,
                    )
                });
            if let Err(e) = reconciled {
                pass.report.failed(&pod_label(attachment), &e);
            }
        }
        self.reattach_ports(&mut pass);
        let mut report = pass.report;
        if !report.changes.is_empty() {
            node_interfaces = self.node_interfaces()?;
        }
        self.remove_orphans(&kept, &node_interfaces, &mut report)?;
        Ok(report)
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
                Err(e) => pass.report.failed(&record.key(), &e),
            }
        }
        let Some(fastpath) = &self.fastpath else {
            return; // `remote_port` refused every end: there are no peers.
        };
        let opened = fastpath.worker.add_remote_ports(&specs);
        for ((record, spec), opened) in records.iter().zip(&specs).zip(opened) {
            // Nothing to undo on failure: a port that could not join was closed again.
            let mut journal = Journal::default();
            match self.adopt_remote_port(record, spec, opened, &mut journal) {
                Ok(()) => pass
                    .report
                    .changed(&record.key(), "re-attached to its interfaces"),
                Err(e) => pass.report.failed(&record.key(), &e),
            }
        }
    }

    fn node_interfaces(&self) -> Result<Interfaces, CniError> {
        interfaces::aliases(&self.node_ns).map_err(|e| {
            cni_error(
                codes::INTERFACE_FAILED,
                "list the node's interfaces",
                e.to_string(),
            )
        })
    }

    /// One attached pod: records of links gone from its topology go, and each link's end
    /// is brought to what its record says (or joined, where it has no record yet).
    fn reconcile_pod(
        &mut self,
        attachment: &AttachmentRecord,
        pod_ns: &NetnsFd,
        wires: Vec<WireRecord>,
        pod_interfaces: &Interfaces,
        node_interfaces: &Interfaces,
        pass: &mut Pass,
    ) -> Result<(), CniError> {
        let (namespace, pod) = (&attachment.pod.namespace, &attachment.pod.name);
        let mut links: Vec<Link> = self
            .topology(namespace, pod)?
            .map(|t| t.spec.links.clone())
            .unwrap_or_default();
        links.sort_by_key(|l| l.uid);
        for wire in wires {
            if !links.iter().any(|l| l.uid == wire.link_uid) {
                self.disconnect_end(&wire, true);
                self.store.remove_wire(&wire.key()).map_err(store_error)?;
                pass.report
                    .changed(&wire.key(), "not in the topology any more: removed");
            }
        }
        for link in &links {
            let key = wire_key(namespace, pod, link.uid);
            // Read again for each link: joining a local wire writes its peer's record.
            let record = self.store.wire(&key).map_err(store_error)?;
            let result = match record {
                None => self.join(attachment, pod_ns, link, pod_interfaces, "joined"),
                Some(record) => match record.state {
                    WireState::Pending => {
                        self.join_pending(attachment, pod_ns, link, pod_interfaces)
                    }
                    WireState::Veth => {
                        if pod_interfaces.contains_key(&record.local_pod_ifname) {
                            Ok(None)
                        } else {
                            self.set_pending(record);
                            self.join(
                                attachment,
                                pod_ns,
                                link,
                                pod_interfaces,
                                "veth gone: made again",
                            )
                        }
                    }
                    WireState::Remote => {
                        let in_place = pod_interfaces.contains_key(&record.local_pod_ifname)
                            && node_interfaces.contains_key(&record.wire_ifname);
                        match (in_place, self.ports.contains_key(&key)) {
                            (true, true) => Ok(None),
                            // Its port went with the run that opened it.
                            (true, false) => {
                                pass.reattach.push((record, link.clone()));
                                continue;
                            }
                            (false, _) => self.repair_remote(pod_ns, link, record, pod_interfaces),
                        }
                    }
                },
            };
            match result {
                Ok(Some(change)) => pass.report.changed(&key, change),
                Ok(None) => {}
                Err(e) => pass.report.failed(&key, &e),
            }
        }
        Ok(())
    }

    /// Joins a pending end if its far end can be had now (a pod attached on this node, or
    /// one another node announced).
    fn join_pending(
        &mut self,
        attachment: &AttachmentRecord,
        pod_ns: &NetnsFd,
        link: &Link,
        pod_interfaces: &Interfaces,
    ) -> Result<Option<&'static str>, CniError> {
        let namespace = &attachment.pod.namespace;
        let local_peer = self
            .attachment_of_pod(namespace, &link.peer_pod)?
            .is_some_and(|p| p.key() != attachment.key());
        let remote_peer = self
            .remote_ends
            .get(&WireKey {
                namespace: namespace.clone(),
                link_uid: link.uid,
            })
            .is_some_and(|r| r.pod == link.peer_pod);
        if !local_peer && !remote_peer {
            return Ok(None);
        }
        self.join(attachment, pod_ns, link, pod_interfaces, "joined")
    }

    /// Joins one end as far as is possible now. An interface of the end's name that
    /// xwire made for this very end (a start interrupted before its record was written)
    /// is removed first; anyone else's is left, and the join fails.
    fn join(
        &mut self,
        attachment: &AttachmentRecord,
        pod_ns: &NetnsFd,
        link: &Link,
        pod_interfaces: &Interfaces,
        what: &'static str,
    ) -> Result<Option<&'static str>, CniError> {
        let ours = interfaces::pod_alias(&attachment.pod.namespace, &attachment.pod.name, link.uid);
        if pod_interfaces
            .get(&link.local_intf)
            .is_some_and(|a| a.as_deref() == Some(&ours))
        {
            log_removal(
                interfaces::delete(pod_ns, &link.local_intf, &ours),
                &link.local_intf,
            );
        }
        let mut journal = Journal::default();
        match self.connect_end(attachment, pod_ns, link, &mut journal) {
            Ok(()) => {
                let key = wire_key(&attachment.pod.namespace, &attachment.pod.name, link.uid);
                let pending = self
                    .store
                    .wire(&key)
                    .map_err(store_error)?
                    .is_none_or(|w| w.state == WireState::Pending);
                if pending {
                    self.announce_pod(&attachment.pod.namespace, &attachment.pod.name);
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

    /// A remote end with either of its interfaces gone is made again.
    fn repair_remote(
        &mut self,
        pod_ns: &NetnsFd,
        link: &Link,
        record: WireRecord,
        pod_interfaces: &Interfaces,
    ) -> Result<Option<&'static str>, CniError> {
        let ours = interfaces::pod_alias(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        );
        match pod_interfaces.get(&record.local_pod_ifname) {
            Some(alias) if alias.as_deref() != Some(&ours) => {
                return Err(cni_error(
                    codes::INTERFACE_EXISTS,
                    format!(
                        "pod {} has an interface {} that xwire did not make: the wire is not made again",
                        record.local_pod_name, record.local_pod_ifname
                    ),
                    format!("its alias is {alias:?}"),
                ));
            }
            _ => {}
        }
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
            .connect_remote(pod_ns, link, &node, &mut rebuilt, &mut journal)
            .and_then(|()| self.write_wire(&rebuilt).map(drop));
        match result {
            Ok(()) => Ok(Some("an interface was gone: made again")),
            Err(e) => {
                self.rollback(journal);
                self.set_pending(record);
                Err(e)
            }
        }
    }

    /// Records with no attachment, fast-path ports with no record, and node-side
    /// interfaces this node made that no record names.
    fn remove_orphans(
        &mut self,
        pods: &HashSet<PodName>,
        node_interfaces: &Interfaces,
        report: &mut Reconciled,
    ) -> Result<(), CniError> {
        let mut remote_ifnames = HashSet::new();
        let mut remote_keys = HashSet::new();
        for wire in self.store.wires().map_err(store_error)? {
            if !pods.contains(&(wire.topo_namespace.clone(), wire.local_pod_name.clone())) {
                self.disconnect_end(&wire, true);
                self.store.remove_wire(&wire.key()).map_err(store_error)?;
                report.changed(&wire.key(), "no attachment: removed");
            } else if wire.state == WireState::Remote {
                remote_ifnames.insert(wire.wire_ifname.clone());
                remote_keys.insert(wire.key());
            }
        }
        let stray_ports: Vec<(String, _)> = self
            .ports
            .iter()
            .filter(|(key, _)| !remote_keys.contains(*key))
            .map(|(key, port)| (key.clone(), port.id))
            .collect();
        for (key, id) in stray_ports {
            self.ports.remove(&key);
            if let Some(fastpath) = &self.fastpath {
                let _ = fastpath.worker.remove_port(id);
            }
            report.changed(&key, "fast-path port with no wire: closed");
        }
        let mine = format!("{NODE_ALIAS_PREFIX}{}:", self.config.node_name);
        let mut strays: Vec<(&String, &str)> = node_interfaces
            .iter()
            .filter_map(|(name, alias)| Some((name, alias.as_deref()?)))
            .filter(|(name, alias)| alias.starts_with(&mine) && !remote_ifnames.contains(*name))
            .collect();
        strays.sort();
        for (name, alias) in strays {
            match interfaces::delete(&self.node_ns, name, alias) {
                Ok(_) => report.changed(name, "node interface with no wire: removed"),
                Err(e) => report.failed(
                    name,
                    &cni_error(
                        codes::INTERFACE_FAILED,
                        "remove a stray interface",
                        e.to_string(),
                    ),
                ),
            }
        }
        Ok(())
    }
}

fn pod_name(attachment: &AttachmentRecord) -> PodName {
    (
        attachment.pod.namespace.clone(),
        attachment.pod.name.clone(),
    )
}

/// How a pass's report names a pod: `namespace/name`.
fn pod_label(attachment: &AttachmentRecord) -> String {
    format!("{}/{}", attachment.pod.namespace, attachment.pod.name)
}
