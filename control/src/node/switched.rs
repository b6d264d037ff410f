//! Same-node wires too large to steer, and impairments. A wire between two pods of this
//! node is a veth straight between them (the fastest wire there is); impaired or
//! captured, it is steered through the switch in place (`steered.rs`), unless its frames
//! are larger than native XDP on a veth takes (jumbo MTUs). Such a wire is remade: each
//! pod's end becomes a veth to the node whose node end is a fast-path port, and the
//! worker links the two ports; when neither is wanted any more, it goes back to a
//! straight veth. Either change remakes both pods' interfaces as their topology describes
//! them (name, MAC, MTU, address); the pods keep running, and frames in flight are lost.
//!
//! Impairments are kept as the topology says on every end with a port (remote or
//! switched): the settings stage of every pass compares what the worker was told with the
//! links (`plan/impairments.rs`), and `impair` tells it the difference.

use std::collections::HashSet;

use xwire_fastpath::impairment::ImpairmentSpec;
use xwire_fastpath::link_table::LinkError;
use xwire_fastpath::link_table::PortId;
use xwire_fastpath::WorkerError;
use xwire_proto::control::{Carrier, WireKey};

use super::plan::Desired;
use super::steered::{max_frame, steerable};
use super::wiring::log_removal;
use super::{ErrorKind, Journal, NodeError, OpenPort, Step};
use crate::interfaces::{self, EndSettings};
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

/// One pod's end of a switched wire, for `make_switched_end`.
pub(super) struct PodEnd<'a> {
    pub(super) ns: &'a NetnsFd,
    pub(super) pod: &'a str,
    pub(super) settings: EndSettings,
}

fn fastpath_error(what: String, e: impl std::fmt::Display) -> NodeError {
    NodeError::new(ErrorKind::Fastpath, what, e.to_string())
}

fn no_fastpath(namespace: &str, pod: &str, uid: u64) -> NodeError {
    NodeError::new(
        ErrorKind::Fastpath,
        format!("link {uid} of {namespace}/{pod} is impaired or captured, which needs the node's fast path"),
        "the fast path starts with the node's certificates ([certs] in xwired.toml, or the cluster's CA)",
    )
}

impl super::DataPlane {
    /// Whether the same-node wire of `link` (and `peer_link`, the far end's view of it)
    /// is remade through the node: it is impaired either way, or captured, and too large
    /// to steer in place.
    pub(super) fn wants_switched(
        &self,
        namespace: &str,
        link: &LinkSpec,
        peer_link: Option<&LinkSpec>,
    ) -> bool {
        let fits = steerable(link) && peer_link.is_none_or(steerable);
        !fits && self.wants_fastpath(namespace, link, peer_link)
    }

    /// Whether the same-node wire of `link` goes through the switch at all.
    fn wants_fastpath(
        &self,
        namespace: &str,
        link: &LinkSpec,
        peer_link: Option<&LinkSpec>,
    ) -> bool {
        link.impairment.is_some()
            || peer_link.is_some_and(|l| l.impairment.is_some())
            || self.captured(&link.wire(namespace))
    }

    /// The same-node wires of `desired` that are remade through the node.
    pub(super) fn switched_wires(&self, desired: &Desired) -> HashSet<WireKey> {
        let mut switched = HashSet::new();
        for pod in &desired.pods {
            for link in pod.links.iter().filter(|l| !steerable(l)) {
                let wire = link.wire(&pod.attachment.pod.namespace);
                if link.impairment.is_some() || self.captured(&wire) {
                    switched.insert(wire);
                }
            }
        }
        switched
    }

    /// The VXLAN wires of `desired` bridged through the switch.
    pub(super) fn bridged_wires(&self, desired: &Desired) -> HashSet<WireKey> {
        let mut bridged = HashSet::new();
        for pod in &desired.pods {
            let namespace = &pod.attachment.pod.namespace;
            let vxlan = |l: &&LinkSpec| l.carrier == Some(Carrier::Vxlan);
            for link in pod.links.iter().filter(vxlan) {
                if self.wants_bridge(namespace, link) {
                    bridged.insert(link.wire(namespace));
                }
            }
        }
        bridged
    }

    /// Whether this node's end of a VXLAN wire of `link` goes through the switch: its
    /// link is impaired (what this pod sends), or a capture runs on it.
    pub(super) fn wants_bridge(&self, namespace: &str, link: &LinkSpec) -> bool {
        link.impairment.is_some() || self.captured(&link.wire(namespace))
    }

    /// Opens the fast-path port on a switched end's node interface and records it under
    /// the end's key.
    fn open_switched_port(
        &mut self,
        key: &EndKey,
        ifname: &str,
        namespace: &str,
        pod: &str,
        link: &LinkSpec,
    ) -> Result<PortId, NodeError> {
        let Some(fastpath) = &self.fastpath else {
            return Err(no_fastpath(namespace, pod, link.uid));
        };
        let max_frame = max_frame(link);
        let wire_id = link.wire(namespace).id();
        let port = step_times::time(step_times::PORT_OPEN, || {
            fastpath.worker_of(wire_id).add_port(ifname, max_frame)
        })
        .map_err(|e| fastpath_error(format!("open a port on {ifname}"), e))?;
        // Its impairment is told by the next sync, whatever pods that pass is about.
        self.impairments_unsynced.insert(key.clone());
        self.ports.insert(
            key.clone(),
            OpenPort {
                id: port.id,
                wire: link.wire(namespace),
                wire_id,
                pod: pod.to_owned(),
                impairment: None,
            },
        );
        Ok(port.id)
    }

    /// Links the ports of a switched wire's two ends, once both are open (at a restart
    /// they open one at a time). A link already there is left.
    pub(super) fn link_switched(
        &self,
        namespace: &str,
        pods: [&str; 2],
        uid: u64,
        journal: Option<&mut Journal>,
    ) -> Result<(), NodeError> {
        let ports = pods.map(|pod| {
            self.ports
                .get(&EndKey::new(namespace, pod, uid))
                .map(|p| p.id)
        });
        let ([Some(a), Some(b)], Some(fastpath)) = (ports, &self.fastpath) else {
            return Ok(());
        };
        let wire = WireKey::new(namespace, uid).id();
        match fastpath.worker_of(wire).add_link(wire, a, b) {
            Ok(_) => {
                if let Some(journal) = journal {
                    journal.record(Step::RemoteLink { wire });
                }
                Ok(())
            }
            Err(WorkerError::Link(LinkError::DuplicateWire(_))) => Ok(()),
            Err(e) => Err(fastpath_error(
                format!("link the ports of wire {uid} of {namespace}"),
                e,
            )),
        }
    }

    /// Tells the worker of `key`'s port its link's impairment (`Action::Impair`). A
    /// remote end whose link waits for its peer is told by a later pass, of whatever
    /// pods, once it is up; a port closed since the plan has nothing to tell.
    pub(super) fn impair(
        &mut self,
        key: &EndKey,
        impairment: Option<ImpairmentSpec>,
    ) -> Result<Option<(String, String)>, NodeError> {
        let (Some(fastpath), Some(port)) = (&self.fastpath, self.end_port(key)) else {
            return Ok(None);
        };
        let (wire, id) = (port.wire_id, port.id);
        match fastpath
            .worker_of(wire)
            .set_impairment(wire, id, impairment)
        {
            Ok(()) => {
                if let Some(port) = self.end_port_mut(key) {
                    port.impairment = impairment;
                }
                let what = if impairment.is_some() {
                    "impairment set"
                } else {
                    "impairment cleared"
                };
                Ok(Some((key.to_string(), what.to_owned())))
            }
            Err(WorkerError::NoSuchLink(..)) => {
                self.impairments_unsynced.insert(key.clone());
                Ok(None)
            }
            Err(e) => Err(fastpath_error(format!("{key}: impairment not set"), e)),
        }
    }
}

impl super::wiring::Wiring<'_> {
    /// Makes one pod's end of a switched wire: the veth to the node and the port on its
    /// node end. Returns the node end's name and the port.
    pub(super) fn make_switched_end(
        &mut self,
        namespace: &str,
        end: PodEnd<'_>,
        link: &LinkSpec,
        journal: &mut Journal,
    ) -> Result<(String, PortId), NodeError> {
        if self.data.fastpath.is_none() {
            return Err(no_fastpath(namespace, end.pod, link.uid));
        }
        let node_end = self.node_end_settings(namespace, end.pod, link);
        let own = EndSettings {
            checksum_off: true,
            ..end.settings
        };
        interfaces::create_veth(end.ns, &own, &self.netns.node_ns, &node_end).map_err(|e| {
            NodeError::new(
                ErrorKind::Interface,
                format!(
                    "make the veth {}:{} -- node:{}",
                    end.pod, own.name, node_end.name
                ),
                e.to_string(),
            )
        })?;
        journal.record(Step::Interface {
            netns: String::new(),
            name: node_end.name.clone(),
            alias: node_end.alias.clone().unwrap_or_default(),
        });
        let key = EndKey::new(namespace, end.pod, link.uid);
        let port = self
            .data
            .open_switched_port(&key, &node_end.name, namespace, end.pod, link)?;
        journal.record(Step::Port {
            key,
            wire: link.wire(namespace).id(),
            id: port,
        });
        Ok((node_end.name, port))
    }

    /// Opens the port again on the node end of `record` (a switched or bridged end,
    /// whose interfaces are in place).
    pub(super) fn reopen_node_end_port(
        &mut self,
        record: &WireRecord,
        link: &LinkSpec,
    ) -> Result<PortId, NodeError> {
        self.data.open_switched_port(
            &record.key(),
            &record.wire_ifname,
            &record.topo_namespace,
            &record.local_pod_name,
            link,
        )
    }

    /// Opens the port of a switched end whose interfaces are in place (the run that
    /// opened it ended), and links it to its far end's when that is open too.
    pub(super) fn reopen_switched(
        &mut self,
        record: &WireRecord,
        link: &LinkSpec,
    ) -> Result<(), NodeError> {
        self.reopen_node_end_port(record, link)?;
        self.data.link_switched(
            &record.topo_namespace,
            [&record.local_pod_name, &record.peer_pod],
            record.link_uid,
            None,
        )
    }

    /// Takes apart an end with a node end (remote or switched): its link (a switched
    /// wire's goes with either end), its port and its veth.
    pub(super) fn release_node_end(&mut self, record: &WireRecord) {
        if let Some(fastpath) = &self.data.fastpath {
            // The wire's id from its namespace and uid, which every end has (a record
            // going back to pending has its peer_intf_id cleared, and one written by an
            // older build keeps an id of the older scheme).
            let wire = record.wire().id();
            let _ = fastpath.worker_of(wire).remove_link(wire);
            if let Some(port) = self.data.ports.remove(&record.key()) {
                step_times::time(step_times::PORT_CLOSE, || {
                    let _ = fastpath.worker_of(wire).remove_port(port.id);
                });
            }
        }
        let alias = interfaces::node_alias(
            &self.config.node_name,
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        );
        log_removal(
            interfaces::delete(&self.netns.node_ns, &record.wire_ifname, &alias),
            &record.wire_ifname,
        );
    }

    /// Takes a switched wire apart from one end: both ends go, and the far end's record
    /// goes back to pending (the next join makes both, switched or not).
    pub(super) fn disconnect_switched(&mut self, record: &WireRecord) {
        self.release_node_end(record);
        let peer_key = EndKey::new(&record.topo_namespace, &record.peer_pod, record.link_uid);
        if let Ok(Some(peer)) = self.records.store.wire(&peer_key) {
            if peer.state == WireState::Switched {
                self.release_node_end(&peer);
                self.records.set_pending(peer);
            }
        }
    }
}
