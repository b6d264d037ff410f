//! The actions for one link's end in a pod whose namespace is open, by the state its
//! record is in.

use super::{Action, Interfaces, Observed};
use crate::interfaces;
use crate::node::vxlan::{tunnel_ifname, tunnel_of};
use crate::store::{AttachmentRecord, EndKey, WireRecord};
use crate::topology::{format_cidr, format_mac, LinkSpec};

/// One link's end in an attached pod whose namespace is open.
pub(super) struct End<'a> {
    pub(super) attachment: &'a AttachmentRecord,
    pub(super) link: &'a LinkSpec,
    pub(super) interfaces: &'a Interfaces,
    /// Both its interfaces are in place from an ADD that did not finish (see
    /// `Action::Join`).
    pub(super) half_made: bool,
}

impl End<'_> {
    pub(super) fn join(&self, why: &'static str) -> Action {
        Action::Join {
            attachment: self.attachment.key(),
            uid: self.link.uid,
            why,
            half_made: self.half_made,
        }
    }

    /// A remote end: in place and open, or its port to open again, or to be made again
    /// (unless an interface of its name is someone else's).
    pub(super) fn remote(
        &self,
        observed: &Observed,
        record: &WireRecord,
        key: &EndKey,
    ) -> Option<Action> {
        let in_pod = self.interfaces.get(&record.local_pod_ifname);
        let in_place =
            in_pod.is_some() && observed.node_interfaces.contains_key(&record.wire_ifname);
        let uid = self.link.uid;
        let attachment = self.attachment.key();
        match (in_place, observed.ports.contains(key)) {
            (true, true) => self.configure(),
            (true, false) => Some(Action::Reattach { attachment, uid }),
            (false, _) => {
                let ours = interfaces::pod_alias(
                    &record.topo_namespace,
                    &record.local_pod_name,
                    record.link_uid,
                );
                match in_pod {
                    Some(seen) if seen.alias.as_deref() != Some(ours.as_str()) => {
                        Some(Action::Foreign {
                            key: key.to_owned(),
                            ifname: record.local_pod_ifname.clone(),
                            alias: seen.alias.clone(),
                        })
                    }
                    _ => Some(Action::RepairRemote { attachment, uid }),
                }
            }
        }
    }

    /// A wire to another node on the kernel's VXLAN: its device in the pod as the link
    /// says, or made again (unless an interface of its name is someone else's). A device
    /// whose tunnel is not the one its record's peer and wire make (the peer node moved
    /// to another address, or the device was changed by hand) is made again too. Bridged
    /// through the switch, its two node interfaces in place and its ports open, or its
    /// ports to open again, or (a part gone) made anew.
    pub(super) fn vxlan(
        &self,
        observed: &Observed,
        record: &WireRecord,
        key: &EndKey,
    ) -> Option<Action> {
        let attachment = self.attachment.key();
        let uid = self.link.uid;
        let ours = interfaces::pod_alias(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        );
        let in_pod = self.interfaces.get(&record.local_pod_ifname);
        if let Some(seen) = in_pod.filter(|i| i.alias.as_deref() != Some(ours.as_str())) {
            return Some(Action::Foreign {
                key: key.to_owned(),
                ifname: record.local_pod_ifname.clone(),
                alias: seen.alias.clone(),
            });
        }
        if !record.has_node_end() {
            return match in_pod {
                Some(seen) if seen.tunnel == tunnel_of(record) => self.configure(),
                _ => Some(Action::RepairRemote { attachment, uid }),
            };
        }
        let tunnel = tunnel_ifname(&record.topo_namespace, &record.local_pod_name, uid);
        let in_place = in_pod.is_some()
            && observed.node_interfaces.contains_key(&record.wire_ifname)
            && observed
                .node_interfaces
                .get(&tunnel)
                .is_some_and(|i| i.tunnel == tunnel_of(record));
        match (in_place, observed.ports.contains(key)) {
            (true, true) => self.configure(),
            (true, false) => Some(Action::Reattach { attachment, uid }),
            (false, _) => Some(Action::Rebuild { attachment, uid }),
        }
    }

    /// A same-node end through the fast path: in place and open, its port to open again,
    /// or (a part gone) both ends made again.
    pub(super) fn switched(
        &self,
        observed: &Observed,
        record: &WireRecord,
        key: &EndKey,
    ) -> Option<Action> {
        let in_place = self.interfaces.contains_key(&record.local_pod_ifname)
            && observed.node_interfaces.contains_key(&record.wire_ifname);
        let uid = self.link.uid;
        let attachment = self.attachment.key();
        match (in_place, observed.ports.contains(key)) {
            (true, true) => self.configure(),
            (true, false) => Some(Action::Reattach { attachment, uid }),
            (false, _) => Some(Action::Rebuild { attachment, uid }),
        }
    }

    /// The end's interface against the link's settings.
    pub(super) fn configure(&self) -> Option<Action> {
        let name = &self.link.local_intf;
        let seen = self.interfaces.get(name)?;
        let mut differs = Vec::new();
        if !seen.up {
            differs.push(format!("{name} is down"));
        }
        if let Some(mtu) = self.link.mtu {
            if seen.mtu != mtu {
                differs.push(format!(
                    "{name} has MTU {}, the topology says {mtu}",
                    seen.mtu
                ));
            }
        }
        if let Some(mac) = self.link.local_mac {
            if seen.mac != mac {
                differs.push(format!(
                    "{name} has MAC {}, the topology says {}",
                    format_mac(seen.mac),
                    format_mac(mac)
                ));
            }
        }
        if let Some(address) = self.link.local_ip {
            if !seen.addresses.contains(&address) {
                differs.push(format!("{name} lacks the address {}", format_cidr(address)));
            }
        }
        (!differs.is_empty()).then(|| Action::Configure {
            attachment: self.attachment.key(),
            uid: self.link.uid,
            differs,
        })
    }
}
