//! Joining and parting one wire end of an attached pod: a veth straight to a peer pod
//! on this node, a veth to the node whose end is a fast-path port joined to a peer node,
//! or nothing yet (pending). Every step is written to a journal so that a failure can
//! be undone.

use xwire_fastpath::peer::PeerId;
use xwire_fastpath::{PortInfo, RemotePort, WorkerError};
use xwire_proto::control::{Carrier, ControlBody, ControlMessage};
use xwire_proto::WireId;

use super::steered::max_frame;
use super::switched::PodEnd;
use std::collections::HashMap;

use xwire_proto::control::WireKey;

use super::{
    DataPlane, ErrorKind, Journal, Namespaces, Node, NodeError, PeerBook, Records, RemoteEnd, Step,
};
use crate::config::DaemonConfig;
use crate::interfaces::{self, EndSettings, Removal};
use crate::netns::NetnsFd;
use crate::store::{AttachmentRecord, EndKey, WireRecord, WireState};
use crate::topology::{format_cidr, LinkSpec};

/// The node-side end of a remote wire: `xw` and 13 hex digits of a hash of the wire
/// end, within Linux's 15 characters and the same on every start.
pub(crate) fn node_ifname(namespace: &str, pod: &str, uid: u64) -> String {
    end_ifname("xw", namespace, pod, uid)
}

/// A node interface of one wire end: a two-letter `prefix` and 13 hex digits of a hash
/// of the end's key.
pub(crate) fn end_ifname(prefix: &str, namespace: &str, pod: &str, uid: u64) -> String {
    let hash = xwire_proto::fnv1a64(EndKey::new(namespace, pod, uid).as_str().as_bytes());
    format!("{prefix}{:013x}", hash >> 12)
}

/// An error if the peer pod already has an interface named `ifname` (a same-node wire's
/// end is made in both pods at once, and must not take over one that is there).
fn ensure_free(
    peer_ns: &NetnsFd,
    namespace: &str,
    pod: &str,
    ifname: &str,
) -> Result<(), NodeError> {
    let found = interfaces::inspect(peer_ns, ifname)
        .map_err(|e| interface_error(format!("read {ifname}"), e))?;
    if found.is_some() {
        return Err(NodeError::new(
            ErrorKind::InterfaceExists,
            format!("peer pod {namespace}/{pod} already has an interface named {ifname}"),
            "",
        ));
    }
    Ok(())
}

/// Whether a remote end's interfaces are already there (made by an earlier run that
/// stopped before it wrote the end's record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Made {
    Not,
    Already,
}

/// The parts that making and unmaking a pod's wire ends works on, borrowed from the node
/// for one change: the records, the fast path's ports, the namespaces its interfaces and
/// VXLAN devices go in, and the far ends peers announced.
pub(super) struct Wiring<'a> {
    pub(super) config: &'a DaemonConfig,
    pub(super) records: &'a mut Records,
    pub(super) data: &'a mut DataPlane,
    pub(super) netns: &'a Namespaces,
    pub(super) remote_ends: &'a HashMap<WireKey, RemoteEnd>,
}

impl Node {
    /// The node's parts, borrowed to make or unmake wire ends.
    pub(super) fn wiring(&mut self) -> Wiring<'_> {
        Wiring::new(
            &self.config,
            &mut self.records,
            &mut self.data,
            &self.netns,
            &self.peers,
        )
    }
}

impl<'a> Wiring<'a> {
    /// The parts it works on, and the far ends `peers` announced.
    pub(super) fn new(
        config: &'a DaemonConfig,
        records: &'a mut Records,
        data: &'a mut DataPlane,
        netns: &'a Namespaces,
        peers: &'a PeerBook,
    ) -> Wiring<'a> {
        Wiring {
            config,
            records,
            data,
            netns,
            remote_ends: &peers.remote_ends,
        }
    }
}

impl Made {
    /// From the plan's `half_made` (see `Action::Join`).
    pub(super) fn from_plan(half_made: bool) -> Made {
        if half_made {
            Made::Already
        } else {
            Made::Not
        }
    }
}

/// The settings of a pod's own end of `link`.
pub(super) fn own_end(namespace: &str, pod: &str, link: &LinkSpec) -> EndSettings {
    EndSettings {
        name: link.local_intf.clone(),
        mtu: link.mtu,
        mac: link.local_mac,
        address: link.local_ip,
        alias: Some(interfaces::pod_alias(namespace, pod, link.uid)),
        checksum_off: false,
        ipv6: interfaces::Ipv6::AsDefault,
    }
}

/// The settings of the peer's end as `link` (seen from the other pod) describes it.
fn far_end(namespace: &str, link: &LinkSpec) -> EndSettings {
    EndSettings {
        name: link.peer_intf.clone(),
        mtu: link.mtu,
        mac: link.peer_mac,
        address: link.peer_ip,
        alias: Some(interfaces::pod_alias(namespace, &link.peer_pod, link.uid)),
        checksum_off: false,
        ipv6: interfaces::Ipv6::AsDefault,
    }
}

fn interface_error(what: String, e: impl std::fmt::Display) -> NodeError {
    NodeError::new(ErrorKind::Interface, what, e.to_string())
}

/// The two pods' namespaces of a same-node wire, and the peer pod's attachment.
struct LocalEnds<'a> {
    pod_ns: &'a NetnsFd,
    peer: &'a AttachmentRecord,
    peer_ns: &'a NetnsFd,
}

/// Logs what deleting one of xwire's interfaces did, when it did not simply work.
pub(super) fn log_removal(removal: Result<Removal, crate::netns::NetnsError>, name: &str) {
    match removal {
        Ok(Removal::Removed | Removal::Absent) => {}
        Ok(Removal::Foreign { alias }) => tracing::warn!(
            interface = name,
            ?alias,
            "not deleted: this interface is not the one xwire made"
        ),
        Err(e) => tracing::warn!("{e}"),
    }
}

impl super::Records {
    /// Writes `record` back as pending (its interfaces are gone).
    pub(super) fn set_pending(&mut self, mut record: WireRecord) {
        record.state = WireState::Pending;
        record.wire_ifname.clear();
        record.peer_intf_id = WireId(0);
        record.peer_node = None;
        record.peer_node_ip = None;
        if let Err(e) = self.store.put_wire(&record) {
            tracing::error!("{e}");
        }
    }

    /// Writes a wire record, returning the one it replaced.
    pub(super) fn write_wire(
        &mut self,
        record: &WireRecord,
    ) -> Result<Option<WireRecord>, NodeError> {
        let previous = self.store.wire(&record.key())?;
        self.store.put_wire(record)?;
        Ok(previous)
    }
}

impl super::DataPlane {
    /// Takes note of a port the fast path opened (and joined) for `record`, or says why
    /// it could not.
    pub(super) fn adopt_remote_port(
        &mut self,
        record: &WireRecord,
        spec: &RemotePort,
        opened: Result<PortInfo, WorkerError>,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        let port = opened.map_err(|e| {
            let node = record.peer_node.as_deref().unwrap_or_default();
            NodeError::new(
                ErrorKind::Fastpath,
                format!("open {} and join it to node {node}", spec.ifname),
                e.to_string(),
            )
        })?;
        journal.record(Step::Port {
            key: record.key(),
            wire: spec.wire,
            id: port.id,
        });
        journal.record(Step::RemoteLink { wire: spec.wire });
        // Its impairment is told by the next sync, whatever pods that pass is about.
        self.impairments_unsynced.insert(record.key());
        self.ports.insert(
            record.key(),
            super::OpenPort {
                id: port.id,
                wire: record.wire(),
                wire_id: spec.wire,
                pod: record.local_pod_name.clone(),
                impairment: None,
            },
        );
        Ok(())
    }

    /// The fast path's id for peer `node`, or why a wire to `peer_pod` there cannot be.
    fn peer_of(&self, node: &str, peer_pod: &str, wire: WireId) -> Result<PeerId, NodeError> {
        let Some(fastpath) = &self.fastpath else {
            return Err(NodeError::new(
 ErrorKind::Fastpath,
                format!(
                    "the peer pod {peer_pod} is on node {node}, but this node has no peers configured"
                ),
                "",
            ));
        };
        match fastpath.peer_for(node, wire) {
            Some(id) => Ok(id),
            None => Err(NodeError::new(
                ErrorKind::Fastpath,
                format!("node {node} is not among this node's peers"),
                "",
            )),
        }
    }

    /// Sends a control message to a peer node if it is up (`Sync` on its `Up` event
    /// covers what it misses while down).
    pub(super) fn send_to(&self, node: &str, body: ControlBody) {
        let Some(fastpath) = &self.fastpath else {
            return;
        };
        if !fastpath.has_peer(node) {
            return;
        }
        let message = ControlMessage {
            request_id: 0,
            body,
        };
        match fastpath.send_control(node, message) {
            Ok(true) => {}
            Ok(false) => tracing::debug!(node, "peer down: the message waits for its Sync"),
            Err(e) => tracing::warn!(node, "control message not sent: {e}"),
        }
    }
}

impl super::wiring::Wiring<'_> {
    /// The node's end of a veth whose frames the switch carries (a remote end's, or a
    /// switched same-node end's): named and marked for the end, TX checksum offload off
    /// (its frames go through the fast path), and no IPv6 of its own.
    pub(super) fn node_end_settings(
        &self,
        namespace: &str,
        pod: &str,
        link: &LinkSpec,
    ) -> EndSettings {
        EndSettings {
            mtu: link.mtu,
            checksum_off: true,
            ipv6: interfaces::Ipv6::Off,
            alias: Some(interfaces::node_alias(
                &self.config.node_name,
                namespace,
                pod,
                link.uid,
            )),
            ..EndSettings::named(&node_ifname(namespace, pod, link.uid))
        }
    }

    /// The record of a pod's end before it is joined to anything.
    pub(super) fn pending_record(
        &self,
        attachment: &AttachmentRecord,
        link: &LinkSpec,
    ) -> WireRecord {
        WireRecord {
            node_name: self.config.node_name.clone(),
            link_uid: link.uid,
            topo_namespace: attachment.pod.namespace.clone(),
            local_pod_netns: attachment.netns.clone(),
            local_pod_netns_id: attachment.netns_id,
            local_pod_name: attachment.pod.name.clone(),
            local_pod_ip: link.local_ip.map(format_cidr),
            local_pod_ifname: link.local_intf.clone(),
            wire_ifname: String::new(),
            peer_intf_id: WireId(0),
            peer_node_ip: None,
            peer_pod: link.peer_pod.clone(),
            peer_node: None,
            state: WireState::Pending,
            container_id: attachment.container_id.clone(),
        }
    }

    /// Joins one end of an attached pod as far as is possible now, and records it. A
    /// remote end `Made::Already` (both its interfaces made by this node for it, and no
    /// record) is joined with the interfaces it has.
    pub(super) fn connect_end(
        &mut self,
        attachment: &AttachmentRecord,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        made: Made,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        let namespace = &attachment.pod.namespace;
        let mut record = self.pending_record(attachment, link);
        let taken = interfaces::inspect(pod_ns, &link.local_intf)
            .map_err(|e| interface_error(format!("read {}", link.local_intf), e))?;
        let ours = interfaces::pod_alias(namespace, &attachment.pod.name, link.uid);
        // A VXLAN end has no node end for the plan to find: its device with this end's
        // alias is enough to know that this node made it.
        let half_made = (made == Made::Already || link.carrier == Some(Carrier::Vxlan))
            && taken
                .as_ref()
                .is_some_and(|i| i.alias.as_deref() == Some(&ours));
        if taken.is_some() && !half_made {
            return Err(NodeError::new(
                ErrorKind::InterfaceExists,
                format!(
                    "pod {}/{} already has an interface named {}",
                    namespace, attachment.pod.name, link.local_intf
                ),
                "another plugin or the container made it; rename the link's local_intf",
            ));
        }
        let peer = self.records.attachment_of_pod(namespace, &link.peer_pod)?;
        let remote = self.remote_ends.get(&link.wire(namespace));
        if let Some(peer) = peer.filter(|p| p.key() != attachment.key()) {
            if half_made {
                log_removal(
                    interfaces::delete(pod_ns, &link.local_intf, &ours),
                    &link.local_intf,
                );
            }
            match peer.open_netns() {
                Ok(peer_ns) => {
                    let ends = LocalEnds {
                        pod_ns,
                        peer: &peer,
                        peer_ns: &peer_ns,
                    };
                    self.connect_local(attachment, ends, link, &mut record, journal)?;
                }
                // The peer pod's namespace is gone, or its path now names another one:
                // nothing is made there, and this end waits for the peer pod to come
                // back (the next reconcile detaches the stale attachment).
                Err(e) if e.is_gone() => {
                    tracing::info!(pod = %attachment.pod.name, peer = %peer.pod.name, reason = %e, "peer pod's namespace is gone: the end stays pending");
                }
                Err(e) => {
                    return Err(interface_error(
                        format!("open peer pod {}'s namespace", peer.pod.name),
                        e,
                    ))
                }
            }
        } else if let Some(remote) = remote.filter(|r| r.pod == link.peer_pod).cloned() {
            let made = Made::from_plan(half_made);
            self.connect_far(pod_ns, link, &remote.node, made, &mut record, journal)?;
        }
        let previous = self.records.write_wire(&record)?;
        journal.record(Step::Wire {
            key: record.key(),
            previous: previous.map(Box::new),
        });
        Ok(())
    }

    /// A veth from the pod straight to its peer pod on this node (or, impaired or
    /// captured, two veths to the node joined by the switch).
    fn connect_local(
        &mut self,
        attachment: &AttachmentRecord,
        ends: LocalEnds<'_>,
        link: &LinkSpec,
        record: &mut WireRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        let LocalEnds {
            pod_ns,
            peer,
            peer_ns,
        } = ends;
        let namespace = &attachment.pod.namespace;
        let peer_link = self
            .records
            .topology_link(namespace, &peer.pod.name, link.uid)?;
        let peer_end = match &peer_link {
            Some(back) => own_end(namespace, &peer.pod.name, back),
            None => far_end(namespace, link),
        };
        ensure_free(peer_ns, namespace, &peer.pod.name, &peer_end.name)?;
        let own = own_end(namespace, &attachment.pod.name, link);
        let switched = self
            .data
            .wants_switched(namespace, link, peer_link.as_ref());
        let (state, own_wire_ifname, peer_wire_ifname) = if switched {
            let own_end = PodEnd {
                ns: pod_ns,
                pod: &attachment.pod.name,
                settings: own.clone(),
            };
            let (own_node_end, _) = self.make_switched_end(namespace, own_end, link, journal)?;
            let peer_side = PodEnd {
                ns: peer_ns,
                pod: &peer.pod.name,
                settings: peer_end.clone(),
            };
            let (peer_node_end, _) = self.make_switched_end(
                namespace,
                peer_side,
                peer_link.as_ref().unwrap_or(link),
                journal,
            )?;
            self.data.link_switched(
                namespace,
                [&attachment.pod.name, &peer.pod.name],
                link.uid,
                Some(journal),
            )?;
            (WireState::Switched, own_node_end, peer_node_end)
        } else {
            interfaces::create_veth(pod_ns, &own, peer_ns, &peer_end).map_err(|e| {
                interface_error(
                    format!(
                        "make the veth {}:{} -- {}:{}",
                        attachment.pod.name, own.name, peer.pod.name, peer_end.name
                    ),
                    e,
                )
            })?;
            journal.record(Step::Interface {
                netns: attachment.netns.clone(),
                name: own.name.clone(),
                alias: own.alias.clone().unwrap_or_default(),
            });
            (WireState::Veth, peer_end.name.clone(), own.name.clone())
        };
        record.state = state;
        record.wire_ifname = own_wire_ifname;
        record.peer_intf_id = link.wire(namespace).id();

        let peer_key = EndKey::new(namespace, &peer.pod.name, link.uid);
        let mut peer_record = self.records.store.wire(&peer_key)?.unwrap_or_else(|| {
            let mut r = self.pending_record(peer, peer_link.as_ref().unwrap_or(link));
            if peer_link.is_none() {
                r.local_pod_ifname = link.peer_intf.clone();
                r.local_pod_ip = link.peer_ip.map(format_cidr);
                r.peer_pod = attachment.pod.name.clone();
            }
            r
        });
        peer_record.state = state;
        peer_record.wire_ifname = peer_wire_ifname;
        peer_record.peer_intf_id = link.wire(namespace).id();
        let previous = self.records.write_wire(&peer_record)?;
        journal.record(Step::Wire {
            key: peer_key,
            previous: previous.map(Box::new),
        });
        Ok(())
    }

    /// The pod's end of a wire to `node`, on the link's carrier: a VXLAN device, or a
    /// veth to a fast-path port.
    pub(super) fn connect_far(
        &mut self,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        node: &str,
        made: Made,
        record: &mut WireRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        if link.carrier == Some(Carrier::Vxlan) {
            if made == Made::Already {
                let alias =
                    interfaces::pod_alias(&record.topo_namespace, &record.local_pod_name, link.uid);
                log_removal(
                    interfaces::delete(pod_ns, &link.local_intf, &alias),
                    &link.local_intf,
                );
            }
            self.connect_vxlan(pod_ns, link, node, record, journal)
        } else {
            self.connect_remote(pod_ns, link, node, made, record, journal)
        }
    }

    /// A veth from the pod to the node, whose node end becomes a fast-path port joined
    /// to `node` by the wire's id.
    fn connect_remote(
        &mut self,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        node: &str,
        made: Made,
        record: &mut WireRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        self.data
            .peer_of(node, &link.peer_pod, link.wire(&record.topo_namespace).id())?;
        let namespace = record.topo_namespace.clone();
        let id = link.wire(&namespace).id();
        if let Some(other) = self.data.ports.other_namespace_with_id(id, &namespace) {
            return Err(NodeError::new(
 ErrorKind::Fastpath,
                format!(
                    "wire {} of namespace {namespace} has the same wire id ({id}) as wire {} of namespace {}, which is up: rename one of the two namespaces",
                    link.uid, other.wire.link_uid, other.wire.namespace
                ),
                "a wire's id is a 32-bit hash of its namespace and its uid; these two namespaces' hashes collide",
            ));
        }
        let mut own = own_end(&namespace, &record.local_pod_name, link);
        own.checksum_off = true;
        let node_end = self.node_end_settings(&namespace, &record.local_pod_name, link);
        let node_end_found = match made {
            Made::Not => false,
            Made::Already => interfaces::inspect(&self.netns.node_ns, &node_end.name)
                .map_err(|e| interface_error(format!("read node:{}", node_end.name), e))?
                .is_some_and(|i| i.alias == node_end.alias),
        };
        if node_end_found {
            // The pod's end keeps what it has; what it lacks is added.
            let present = interfaces::inspect(pod_ns, &own.name)
                .map_err(|e| interface_error(format!("read {}", own.name), e))?
                .map(|i| i.addresses)
                .unwrap_or_default();
            own.address = own.address.filter(|a| !present.contains(a));
            interfaces::configure(pod_ns, &own)
                .and_then(|()| interfaces::configure(&self.netns.node_ns, &node_end))
                .map_err(|e| {
                    interface_error(
                        format!(
                            "take up the veth {}:{} -- node:{} as it was left",
                            record.local_pod_name, own.name, node_end.name
                        ),
                        e,
                    )
                })?;
        } else {
            if made == Made::Already {
                let alias = own.alias.clone().unwrap_or_default();
                log_removal(interfaces::delete(pod_ns, &own.name, &alias), &own.name);
            }
            interfaces::create_veth(pod_ns, &own, &self.netns.node_ns, &node_end).map_err(|e| {
                interface_error(
                    format!(
                        "make the veth {}:{} -- node:{}",
                        record.local_pod_name, own.name, node_end.name
                    ),
                    e,
                )
            })?;
        }
        journal.record(Step::Interface {
            netns: String::new(),
            name: node_end.name.clone(),
            alias: node_end.alias.clone().unwrap_or_default(),
        });
        record.state = WireState::Remote;
        record.wire_ifname = node_end.name;
        record.peer_intf_id = id;
        record.peer_node = Some(node.to_owned());
        record.peer_node_ip = self
            .data
            .fastpath
            .as_ref()
            .and_then(|f| f.addresses.get(node).cloned());
        self.open_remote_port(record, link, journal)
    }

    /// Opens the fast-path port on a remote wire's node end (which exists) and joins it
    /// to the record's peer node: at a join, and when a restart finds the end in place.
    pub(super) fn open_remote_port(
        &mut self,
        record: &WireRecord,
        link: &LinkSpec,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        let spec = self.remote_port(record, link)?;
        let fastpath = self
            .data
            .fastpath
            .as_ref()
            .expect("remote_port found the fast path");
        let opened = fastpath
            .add_remote_ports(std::slice::from_ref(&spec))
            .pop()
            .expect("one answer per port");
        self.data.adopt_remote_port(record, &spec, opened, journal)
    }

    /// What the fast path needs to open the port of remote end `record` and join it to
    /// the peer node.
    pub(super) fn remote_port(
        &self,
        record: &WireRecord,
        link: &LinkSpec,
    ) -> Result<RemotePort, NodeError> {
        let carrier = link.carrier;
        let node = record.peer_node.as_deref().unwrap_or_default();
        // From the wire's name, not the id the record keeps: a record written by an older
        // build keeps an id of the older scheme, which the peer no longer uses.
        let wire = record.wire().id();
        let peer = self.data.peer_of(node, &record.peer_pod, wire)?;
        Ok(RemotePort {
            ifname: record.wire_ifname.clone(),
            max_frame: max_frame(link),
            wire,
            peer,
            carrier,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_interface_names_are_stable_and_distinct() {
        let name = node_ifname("lab", "r1", 0);
        assert_eq!(name.len(), 15);
        assert_eq!(name, node_ifname("lab", "r1", 0));
        assert_ne!(name, node_ifname("lab", "r2", 0));
    }
}
