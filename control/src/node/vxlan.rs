//! Wires to another node on the kernel's VXLAN (`carrier: vxlan` on the link): the pod's
//! end of the wire is a VXLAN device made from the node's namespace and moved into the
//! pod, so its tunnel's UDP socket stays on the node's underlay while the pod sees an
//! ordinary Ethernet interface. Nothing of the wire is in the fast path: the peers'
//! control messages still announce it (so each end knows when the other is up, and
//! reconciliation works as for a QUIC wire), and the kernel carries its frames.
//!
//! While the link is impaired or captured, the end is bridged through the switch
//! instead: the pod's interface is a veth to the node, as a QUIC wire's is, and the
//! VXLAN device stays on the node (`tunnel_ifname`); the switch links a port on each, so
//! the pod's frames meet the impairment (or the tap) on their way to the tunnel. Moving
//! on and off the bridge makes the pod's interface again (its name, MAC, MTU and
//! address stay; frames in flight are lost); the far end is not disturbed.
//!
//! What meshnet does for its cross-node links by default, and what a lab on a trusted
//! underlay gets at the kernel's speed: no encryption.

use std::net::{IpAddr, SocketAddr};

use xwire_fastpath::link_table::PortId;
use xwire_proto::WireId;

use super::steered::max_frame;
use super::switched::PodEnd;
use super::wiring::{end_ifname, log_removal, own_end};
use super::{ErrorKind, Journal, NodeError, Step};
use crate::interfaces::{self, EndSettings, Tunnel};
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

/// The UDP port of every VXLAN wire: IANA's, as meshnet and the kernel's own examples use.
pub(crate) const VXLAN_PORT: u16 = 4789;

/// The VNI of wire `id`: the top 24 bits of the id, which are its digest's (both ends
/// reckon the same, with nothing to agree on). Zero is skipped, as some tools read it as
/// "none".
pub(crate) fn vni(id: WireId) -> u32 {
    match (id.0 >> 40) as u32 {
        0 => 1,
        vni => vni,
    }
}

/// The node's VXLAN device of a bridged end: `xv` and 13 hex digits of a hash of the
/// wire end (as the veth's node end is `xw` and the same digits).
pub(crate) fn tunnel_ifname(namespace: &str, pod: &str, uid: u64) -> String {
    end_ifname("xv", namespace, pod, uid)
}

/// The alias of a bridged end's VXLAN device: the node end's, marked as the tunnel.
fn tunnel_alias(node: &str, namespace: &str, pod: &str, uid: u64) -> String {
    format!(
        "{}/vxlan",
        interfaces::node_alias(node, namespace, pod, uid)
    )
}

/// The tunnel a VXLAN end of `record` has when it is as made: to its peer node's address.
pub(crate) fn tunnel_of(record: &WireRecord) -> Option<Tunnel> {
    let address: SocketAddr = record.peer_node_ip.as_deref()?.parse().ok()?;
    Some(tunnel_to(record.wire().id(), address.ip()))
}

fn tunnel_to(id: WireId, remote: IpAddr) -> Tunnel {
    Tunnel {
        vni: vni(id),
        remote,
        port: VXLAN_PORT,
    }
}

impl super::Records {
    /// Another VXLAN end of this node whose VNI is `vni`, if the store names one.
    fn vni_taken_by(&self, key: &EndKey, vni: u32) -> Option<String> {
        let wires = self.store.wires().ok()?;
        wires
            .iter()
            .filter(|w| w.state == WireState::Vxlan && w.key() != *key)
            .find(|w| self::vni(w.wire().id()) == vni)
            .map(|w| w.key().to_string())
    }
}

impl super::DataPlane {
    /// Opens the port on a bridged end's VXLAN device, and keeps it.
    fn open_tunnel_port(
        &mut self,
        record: &WireRecord,
        link: &LinkSpec,
    ) -> Result<PortId, NodeError> {
        let Some(fastpath) = &self.fastpath else {
            return Err(NodeError::new(
                ErrorKind::Fastpath,
                format!(
                    "wire {} is impaired or captured, which needs the node's fast path",
                    record.key()
                ),
                "",
            ));
        };
        let ifname = tunnel_ifname(&record.topo_namespace, &record.local_pod_name, link.uid);
        let wire = record.wire().id();
        let port = step_times::time(step_times::PORT_OPEN, || {
            fastpath.worker_of(wire).add_port(&ifname, max_frame(link))
        })
        .map_err(|e| {
            NodeError::new(
                ErrorKind::Fastpath,
                format!("open a port on {ifname}"),
                e.to_string(),
            )
        })?;
        self.tunnel_ports.insert(record.key(), port.id);
        Ok(port.id)
    }

    /// Links a bridged end's two ports in the switch.
    fn link_bridge(
        &self,
        record: &WireRecord,
        pod: PortId,
        tunnel: PortId,
    ) -> Result<(), NodeError> {
        let wire = record.wire().id();
        let fastpath = self.fastpath.as_ref().expect("its ports were opened");
        fastpath
            .worker_of(wire)
            .add_link(wire, pod, tunnel)
            .map(drop)
            .map_err(|e| {
                NodeError::new(
                    ErrorKind::Fastpath,
                    format!("link the ports of wire {}", record.key()),
                    e.to_string(),
                )
            })
    }
}

impl super::wiring::Wiring<'_> {
    /// Makes the pod's end of a wire to `node` on the kernel's VXLAN (bridged through the
    /// switch when the link is impaired or captured), and records it so.
    pub(super) fn connect_vxlan(
        &mut self,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        node: &str,
        record: &mut WireRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        let namespace = record.topo_namespace.clone();
        let address = self
            .data
            .fastpath
            .as_ref()
            .and_then(|f| f.addresses.get(node).cloned());
        let Some(remote) = self.data.peer_ip(node) else {
            return Err(NodeError::new(
                ErrorKind::Fastpath,
                format!("node {node} is not among this node's peers"),
                "a VXLAN wire's far end is the peer node's address",
            ));
        };
        let id = link.wire(&namespace).id();
        let tunnel = tunnel_to(id, remote);
        let own = own_end(&namespace, &record.local_pod_name, link);
        record.wire_ifname = if self.data.wants_bridge(&namespace, link) {
            self.bridge(pod_ns, link, record, own, tunnel, journal)?
        } else {
            let netns = record.local_pod_netns.clone();
            self.make_tunnel((pod_ns, &netns), &own, tunnel, record, journal)?;
            String::new()
        };
        record.state = WireState::Vxlan;
        record.peer_intf_id = id;
        record.peer_node = Some(node.to_owned());
        record.peer_node_ip = address;
        Ok(())
    }

    /// Makes the VXLAN device `end` in `ns` (the pod's, or the node's own for a bridged
    /// end: its path, as the journal names it, is then empty), with its tunnel in the
    /// node's namespace.
    fn make_tunnel(
        &self,
        (ns, path): (&NetnsFd, &str),
        end: &EndSettings,
        tunnel: Tunnel,
        record: &WireRecord,
        journal: &mut Journal,
    ) -> Result<(), NodeError> {
        interfaces::create_vxlan(&self.netns.node_ns, ns, end, tunnel).map_err(|e| {
            NodeError::new(
                ErrorKind::Interface,
                format!(
                    "make {}:{} a VXLAN device to {} (VNI {})",
                    ns.label(),
                    end.name,
                    tunnel.remote,
                    tunnel.vni
                ),
                self.records
                    .vni_taken_by(&record.key(), tunnel.vni)
                    .map(|other| {
                        format!(
                            "{e}: wire {other} has the same VNI on this node (a VNI is 24 bits \
                             of the wire's id); give one of the two links another carrier"
                        )
                    })
                    .unwrap_or_else(|| e.to_string()),
            )
        })?;
        journal.record(Step::Interface {
            netns: path.to_owned(),
            name: end.name.clone(),
            alias: end.alias.clone().unwrap_or_default(),
        });
        Ok(())
    }

    /// Bridges a VXLAN end through the switch: the tunnel on the node, the pod's veth to
    /// the node, a port on each, linked. Returns the veth's node end.
    fn bridge(
        &mut self,
        pod_ns: &NetnsFd,
        link: &LinkSpec,
        record: &WireRecord,
        own: EndSettings,
        tunnel: Tunnel,
        journal: &mut Journal,
    ) -> Result<String, NodeError> {
        let (namespace, pod) = (record.topo_namespace.clone(), record.local_pod_name.clone());
        let tunnel_end = self.tunnel_end(record, link);
        self.make_tunnel(
            (&self.netns.node_ns, ""),
            &tunnel_end,
            tunnel,
            record,
            journal,
        )?;
        let pod_end = PodEnd {
            ns: pod_ns,
            pod: &pod,
            settings: own,
        };
        let (node_end, pod_port) = self.make_switched_end(&namespace, pod_end, link, journal)?;
        let tunnel_port = self.data.open_tunnel_port(record, link)?;
        let wire = link.wire(&namespace).id();
        journal.record(Step::Port {
            key: record.key(),
            wire,
            id: tunnel_port,
        });
        self.data.link_bridge(record, pod_port, tunnel_port)?;
        journal.record(Step::RemoteLink { wire });
        Ok(node_end)
    }

    /// The settings of a bridged end's VXLAN device on the node.
    fn tunnel_end(&self, record: &WireRecord, link: &LinkSpec) -> EndSettings {
        let (namespace, pod, uid) = (&record.topo_namespace, &record.local_pod_name, link.uid);
        EndSettings {
            mtu: link.mtu,
            ipv6: interfaces::Ipv6::Off,
            alias: Some(tunnel_alias(&self.config.node_name, namespace, pod, uid)),
            ..EndSettings::named(&tunnel_ifname(namespace, pod, uid))
        }
    }

    /// Opens the ports of a bridged end whose interfaces are in place (the run that
    /// opened them ended), and links them.
    pub(super) fn reopen_bridged(
        &mut self,
        record: &WireRecord,
        link: &LinkSpec,
    ) -> Result<(), NodeError> {
        let pod_port = self.reopen_node_end_port(record, link)?;
        let tunnel_port = self.data.open_tunnel_port(record, link)?;
        self.data.link_bridge(record, pod_port, tunnel_port)
    }

    /// Takes a bridged end apart: its link, both ports, the veth and the tunnel.
    pub(super) fn release_bridged(&mut self, record: &WireRecord) {
        self.release_node_end(record);
        if let (Some(port), Some(fastpath)) = (
            self.data.tunnel_ports.remove(&record.key()),
            &self.data.fastpath,
        ) {
            let wire = record.wire().id();
            step_times::time(step_times::PORT_CLOSE, || {
                let _ = fastpath.worker_of(wire).remove_port(port);
            });
        }
        let (namespace, pod, uid) = (
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        );
        let name = tunnel_ifname(namespace, pod, uid);
        let alias = tunnel_alias(&self.config.node_name, namespace, pod, uid);
        log_removal(
            interfaces::delete(&self.netns.node_ns, &name, &alias),
            &name,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wire_has_one_vni_in_range_and_different_wires_mostly_differ() {
        let a = WireId::new("lab", 1);
        assert_eq!(vni(a), vni(WireId::new("lab", 1)));
        let vnis: std::collections::HashSet<u32> =
            (0..1000).map(|uid| vni(WireId::new("lab", uid))).collect();
        assert!(vnis.iter().all(|v| (1..1 << 24).contains(v)));
        // 1000 draws from 2^24: a collision is possible, but two would be a broken hash.
        assert!(vnis.len() >= 998, "{}", vnis.len());
    }
}
