//! ADD, DEL, CHECK and GC for one node.

use std::collections::HashSet;
use std::path::Path;

use xwire_proto::local::{AddResult, CniCall, CniInterface, CniIp, GcCall, Response};

use super::calls::Call;
use super::plan::{plan, Action};
use super::reconcile::{remove_pods_interfaces_at_once, Scope};
use super::{ErrorKind, Journal, NodeError};
use crate::interfaces;
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{AttachmentKey, AttachmentRecord, WireRecord, WireState};
use crate::topology::format_mac;

impl Call<'_> {
    /// Deletes the interfaces of the pods of DELs that came together (callers waiting
    /// at once) in one go, before each DEL is answered in turn: the kernel's waits for
    /// the deletions overlap instead of queueing one pod behind the other. Each DEL still
    /// answers only once its own pod's interfaces and records are gone.
    pub(crate) fn begin_dels<'a>(&self, calls: impl IntoIterator<Item = &'a CniCall>) {
        let attachments: Vec<AttachmentRecord> = calls
            .into_iter()
            .filter_map(|call| {
                let key = AttachmentKey::new(&call.container_id, &call.ifname);
                self.node.records.store.attachment(&key).ok().flatten()
            })
            .collect();
        if attachments.len() > 1 {
            step_times::time(step_times::NETLINK_POD_INTERFACES, || {
                remove_pods_interfaces_at_once(&attachments)
            });
        }
    }

    pub(super) fn add(&mut self, call: CniCall) -> Result<Response, NodeError> {
        let pod = &call.pod;
        // A namespace not opted in (a cluster's label), or a pod with no Topology: the
        // primary plugin's result passes through untouched.
        if !self.node.records.store.wires_namespace(&pod.namespace)
            || self
                .node
                .records
                .topology(&pod.namespace, &pod.name)?
                .is_none()
        {
            return Ok(Response::NotManaged);
        }
        // The namespace must be a pod's before anything is recorded.
        let pod_ns = self.open_pod_netns(&call.netns)?;
        let attachment = AttachmentRecord {
            container_id: call.container_id.clone(),
            ifname: call.ifname.clone(),
            network: network_name(&call.config),
            pod: pod.clone(),
            netns: call.netns.clone(),
            netns_id: pod_ns.identity().ok(),
        };
        drop(pod_ns);
        // An attachment is keyed by container id and interface: one that another pod
        // holds must not be written over (that pod's wires would go with it).
        if let Some(holder) = self
            .node
            .records
            .store
            .attachment(&attachment.key())?
            .filter(|held| held.pod != *pod)
        {
            return Err(NodeError::new(
                ErrorKind::PodAlreadyAttached,
                format!(
                    "container {} ({}) is attached as pod {}/{}, not {}/{}",
                    call.container_id,
                    call.ifname,
                    holder.pod.namespace,
                    holder.pod.name,
                    pod.namespace,
                    pod.name
                ),
                "a container id belongs to one pod",
            ));
        }
        if let Some(existing) = self
            .node
            .records
            .attachment_of_pod(&pod.namespace, &pod.name)?
        {
            // The same path may name a new namespace (a reused pid's): then it is
            // another container, whatever the path says.
            let same_netns = existing.netns == attachment.netns
                && (existing.netns_id.is_none() || existing.netns_id == attachment.netns_id);
            if existing.key() == attachment.key() && same_netns {
                return self.node.records.added(&attachment).map(Response::Added);
            }
            let other_alive = !same_netns
                && match existing.open_netns() {
                    Ok(_) => true,
                    Err(e) if e.is_gone() => false,
                    // Cannot tell whether the earlier container lives: leave it be.
                    Err(e) => {
                        return Err(NodeError::new(
 ErrorKind::TryAgainLater,
                            format!(
                                "pod {}/{} is attached as container {}, whose namespace cannot be opened now",
                                pod.namespace, pod.name, existing.container_id
                            ),
                            e.to_string(),
                        ))
                    }
                };
            if other_alive {
                return Err(NodeError::new(
                    ErrorKind::PodAlreadyAttached,
                    format!(
                        "pod {}/{} is already attached as container {} in {}",
                        pod.namespace, pod.name, existing.container_id, existing.netns
                    ),
                    "delete that container first",
                ));
            }
            self.node.detach(&existing)?;
        }

        let mut journal = Journal::default();
        let result = self.node.attach(&attachment, &mut journal);
        match result {
            Ok(()) => {
                self.node
                    .peer_talk()
                    .announce_pod(&pod.namespace, &pod.name);
                // Links of the object that do not parse (the API server does not check
                // addresses) were left out: the object's status says which and why.
                let left_out = self.node.records.links_left_out(&pod.namespace, &pod.name);
                self.node.records.report_pod(&attachment, left_out);
                self.node.records.added(&attachment).map(Response::Added)
            }
            Err(e) => {
                self.node.wiring().rollback(journal);
                self.node
                    .records
                    .report_pod(&attachment, Some(format!("{}: {}", e.msg, e.details)));
                Err(e)
            }
        }
    }

    pub(super) fn del(&mut self, call: CniCall) -> Result<(), NodeError> {
        let key = AttachmentKey::new(&call.container_id, &call.ifname);
        match self.node.records.store.attachment(&key)? {
            Some(attachment) => self.node.detach(&attachment),
            None => Ok(()),
        }
    }

    pub(super) fn check(&mut self, call: CniCall) -> Result<(), NodeError> {
        let pod = &call.pod;
        if self
            .node
            .records
            .topology(&pod.namespace, &pod.name)?
            .is_none()
        {
            return Ok(());
        }
        let key = AttachmentKey::new(&call.container_id, &call.ifname);
        let Some(attachment) = self.node.records.store.attachment(&key)? else {
            return Err(NodeError::new(
                ErrorKind::UnknownContainer,
                format!(
                    "xwire has no attachment {key} for pod {}/{}",
                    pod.namespace, pod.name
                ),
                "",
            ));
        };
        self.open_pod_netns(&call.netns)?;
        // CHECK answers from the plan, both stages: what a pass would do to this pod,
        // its wire ends, steering, impairments and routes, is what differs.
        let mut observation = self
            .node
            .observer()
            .observe(Scope::Pods(std::slice::from_ref(&attachment)))?;
        self.node
            .observer()
            .observe_settings(&mut observation, true);
        let problems: Vec<String> = plan(&observation.desired, &observation.observed)
            .iter()
            .filter(|action| action.concerns(&attachment))
            .map(Action::describe)
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(NodeError::new(
                ErrorKind::CheckFailed,
                format!(
                    "pod {}/{} is not as its topology says: {}",
                    pod.namespace,
                    pod.name,
                    problems.join("; ")
                ),
                problems.join("\n"),
            ))
        }
    }

    pub(super) fn gc(&mut self, call: GcCall) -> Result<(), NodeError> {
        let network = network_name(&call.config);
        let valid: HashSet<AttachmentKey> = call
            .valid_attachments
            .iter()
            .map(|a| AttachmentKey::new(&a.container_id, &a.ifname))
            .collect();
        for attachment in self.node.records.store.attachments()? {
            if attachment.network == network && !valid.contains(&attachment.key()) {
                tracing::info!(pod = %attachment.pod.name, container = %attachment.container_id, "GC: not a valid attachment");
                self.node.detach(&attachment)?;
            }
        }
        Ok(())
    }
}

fn network_name(config: &serde_json::Value) -> String {
    config
        .get("name")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn open_netns(path: &str) -> Result<NetnsFd, NodeError> {
    if path.is_empty() {
        return Err(NodeError::new(
            ErrorKind::InvalidEnvironment,
            "CNI_NETNS is empty",
            "ADD and CHECK need the pod's network namespace",
        ));
    }
    NetnsFd::open(Path::new(path)).map_err(|e| {
        if e.is_shortage() {
            // The runtime retries code 11; code 4 would tell it the pod is at fault.
            return NodeError::new(
                ErrorKind::TryAgainLater,
                format!("CNI_NETNS {path} cannot be opened now"),
                e.to_string(),
            );
        }
        NodeError::new(
            ErrorKind::InvalidEnvironment,
            format!("CNI_NETNS {path} is not a network namespace"),
            e.to_string(),
        )
    })
}

impl super::Records {
    pub(super) fn wires_of(
        &self,
        attachment: &AttachmentRecord,
    ) -> Result<Vec<WireRecord>, NodeError> {
        let pod = &attachment.pod;
        Ok(self.store.wires_of_pod(&pod.namespace, &pod.name)?)
    }
}

impl Call<'_> {
    /// Opens the pod's network namespace that a call names, and refuses one that is not
    /// a pod's: the node's own (which is the daemon's: a path such as `/proc/self/ns/net`
    /// is read in the daemon's context, not the caller's) or the host's.
    fn open_pod_netns(&self, path: &str) -> Result<NetnsFd, NodeError> {
        let pod_ns = open_netns(path)?;
        // The caller's own view of the path, where it sent one: the daemon may see other
        // processes (`/proc/<pid>`) or other mounts, and must wire what the caller meant.
        match &self.caller_netns {
            Some(Err(e)) => {
                return Err(NodeError::new(
                    ErrorKind::InvalidEnvironment,
                    format!("CNI_NETNS {path} is not a network namespace where the caller is"),
                    e.clone(),
                ))
            }
            Some(Ok(theirs)) if !pod_ns.is_same(theirs).unwrap_or(false) => {
                return Err(NodeError::new(
                    ErrorKind::InvalidEnvironment,
                    format!(
                        "CNI_NETNS {path} is another network namespace for the daemon than for its caller"
                    ),
                    "the daemon sees other processes or mounts than the runtime that called it; give a path both see alike (a bind mount under /run/netns)",
                ));
            }
            _ => {}
        }
        let not_pods = [
            ("the node's own", Some(&self.node.netns.node_ns)),
            ("the host's", self.node.netns.host_ns.as_ref()),
        ];
        for (whose, ns) in not_pods {
            if ns.is_some_and(|ns| pod_ns.is_same(ns).unwrap_or(false)) {
                return Err(NodeError::new(
                    ErrorKind::InvalidEnvironment,
                    format!("CNI_NETNS {path} is {whose} network namespace, not a pod's"),
                    "xwire wires pods' namespaces only",
                ));
            }
        }
        Ok(pod_ns)
    }
}

impl super::Records {
    fn links_left_out(&self, namespace: &str, pod: &str) -> Option<String> {
        let topology = self.topology(namespace, pod).ok().flatten()?;
        let errors: Vec<String> = topology
            .topology
            .spec
            .links
            .iter()
            .filter_map(|link| {
                link.parse()
                    .err()
                    .map(|e| format!("link uid {}: {e}", link.uid))
            })
            .collect();
        (!errors.is_empty()).then(|| format!("links left out: {}", errors.join("; ")))
    }

    /// The pod's Topology status after ADD (where the store keeps one).
    fn report_pod(&self, attachment: &AttachmentRecord, error: Option<String>) {
        let skipped_by_peers = match error {
            Some(_) => Vec::new(),
            None => self
                .wires_of(attachment)
                .unwrap_or_default()
                .into_iter()
                .filter(|w| w.state == WireState::Pending)
                .map(|w| (w.peer_pod, w.link_uid))
                .collect(),
        };
        self.store.report_pod(&crate::store::PodReport {
            namespace: attachment.pod.namespace.clone(),
            pod: attachment.pod.name.clone(),
            net_ns: attachment.netns.clone(),
            container_id: attachment.container_id.clone(),
            error,
            skipped_by_peers,
        });
    }

    /// The result of an attachment: the pod's interfaces that exist, and their addresses.
    fn added(&self, attachment: &AttachmentRecord) -> Result<AddResult, NodeError> {
        // Judged as a pod's when the ADD began.
        let pod_ns = open_netns(&attachment.netns)?;
        let mut result = AddResult {
            interfaces: Vec::new(),
            ips: Vec::new(),
        };
        let mut wires = self.wires_of(attachment)?;
        wires.sort_by_key(|w| w.link_uid);
        for wire in wires.iter().filter(|w| w.state != WireState::Pending) {
            let state = interfaces::inspect(&pod_ns, &wire.local_pod_ifname).map_err(|e| {
                NodeError::new(
                    ErrorKind::Interface,
                    "read the pod's interfaces",
                    e.to_string(),
                )
            })?;
            let Some(state) = state else { continue };
            let index = result.interfaces.len() as u32;
            result.interfaces.push(CniInterface {
                name: wire.local_pod_ifname.clone(),
                mac: Some(format_mac(state.mac)),
                mtu: Some(state.mtu),
                sandbox: Some(attachment.netns.clone()),
            });
            if let Some(ip) = &wire.local_pod_ip {
                result.ips.push(CniIp {
                    address: ip.clone(),
                    gateway: None,
                    interface: index,
                });
            }
        }
        Ok(result)
    }
}
