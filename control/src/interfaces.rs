//! The interfaces xwire makes: veth pairs between a pod and its peer (another pod, or
//! the node for a wire that goes through the fast path), their settings, and what CHECK
//! reads back. Every pod-side interface carries an alias starting with `ALIAS_PREFIX`,
//! so that what xwire made can be told from what other plugins made, even with no
//! daemon to ask (the plugin's DEL when the daemon is down).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{
    InfoData, InfoVxlan, LinkAttribute, LinkFlags, LinkInfo, LinkMessage,
};
use rtnetlink::{LinkUnspec, LinkVxlan};
use xwire_netns::links::{self, find, MAX_ALIAS};

use crate::netns::{NetnsError, NetnsFd};
use crate::step_times;

pub use xwire_netns::links::{EndSettings, Ipv6};

/// Marks an interface as xwire's: `xwire:<namespace>/<pod>/<uid>`.
pub const ALIAS_PREFIX: &str = "xwire:";
/// Marks a node-side end of a remote wire as made by one node's daemon:
/// `xwire-node:<node>:<namespace>/<pod>/<uid>` (several emulated nodes may share a
/// namespace, and each clears away only its own).
pub(crate) const NODE_ALIAS_PREFIX: &str = "xwire-node:";
const ENODEV: i32 = 19;

/// The longest a uid takes in an alias (`u64::MAX` in decimal).
const UID_DIGITS: usize = 20;

/// The start of every alias of `pod`'s ends: `xwire:<namespace>/<pod>/`. Kubernetes
/// allows names (a 63-byte namespace, a 253-byte pod) that together make an alias longer
/// than the kernel keeps; such a pod's name is written as `~` and a 64-bit hash of it,
/// so that its interfaces are labelled, and told apart, like anyone's. Shorter names
/// are written out, as they always were (interfaces made by earlier builds keep theirs).
pub(crate) fn pod_alias_prefix(namespace: &str, pod: &str) -> String {
    format!("{ALIAS_PREFIX}{}", pod_part(namespace, pod))
}

/// `<namespace>/<pod>/`, or with the pod's name hashed where the pod's alias would
/// otherwise be too long (see `pod_alias_prefix`).
fn pod_part(namespace: &str, pod: &str) -> String {
    let written = format!("{namespace}/{pod}/");
    if ALIAS_PREFIX.len() + written.len() + UID_DIGITS <= MAX_ALIAS {
        return written;
    }
    hashed_pod_part(namespace, pod)
}

fn hashed_pod_part(namespace: &str, pod: &str) -> String {
    format!(
        "{namespace}/~{:016x}/",
        xwire_proto::fnv1a64(pod.as_bytes())
    )
}

/// The alias of a pod's end of wire `uid` in topology namespace `namespace`.
pub(crate) fn pod_alias(namespace: &str, pod: &str, uid: u64) -> String {
    format!("{}{uid}", pod_alias_prefix(namespace, pod))
}

/// The start of every alias `node` gives the node ends it makes: `xwire-node:<node>:`,
/// with a node name that leaves too little room (see `pod_alias_prefix`) hashed.
pub(crate) fn node_alias_prefix(node: &str) -> String {
    let written = format!("{NODE_ALIAS_PREFIX}{node}:");
    // Room kept for the rest: a namespace, a hashed pod name, a uid.
    const REST: usize = 63 + 2 + 16 + 1 + UID_DIGITS + 1;
    if written.len() + REST <= MAX_ALIAS {
        return written;
    }
    format!(
        "{NODE_ALIAS_PREFIX}~{:016x}:",
        xwire_proto::fnv1a64(node.as_bytes())
    )
}

/// The alias of `node`'s end of a remote wire of `pod`.
pub fn node_alias(node: &str, namespace: &str, pod: &str, uid: u64) -> String {
    let prefix = node_alias_prefix(node);
    let alias = format!("{prefix}{}{uid}", pod_part(namespace, pod));
    if alias.len() <= MAX_ALIAS {
        return alias;
    }
    // A namespace and pod that fit a pod's alias but not with a node's name before them.
    format!("{prefix}{}{uid}", hashed_pod_part(namespace, pod))
}

/// An interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceState {
    pub up: bool,
    pub mtu: u32,
    pub mac: [u8; 6],
    pub alias: Option<String>,
    pub addresses: Vec<(IpAddr, u8)>,
    /// What the kernel says of it as a VXLAN device, if it is one.
    pub tunnel: Option<Tunnel>,
}

/// A VXLAN device's tunnel: its VNI, the far end's address and the UDP port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tunnel {
    pub vni: u32,
    pub remote: IpAddr,
    pub port: u16,
}

impl Tunnel {
    /// From a link's attributes, if they describe a VXLAN device with a unicast remote.
    fn of(attributes: &[LinkAttribute]) -> Option<Tunnel> {
        let data = attributes.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
                LinkInfo::Data(InfoData::Vxlan(data)) => Some(data),
                _ => None,
            }),
            _ => None,
        })?;
        let (mut vni, mut remote, mut port) = (None, None, None);
        for item in data {
            match item {
                InfoVxlan::Id(id) => vni = Some(*id),
                InfoVxlan::Group(a) => remote = Some(IpAddr::V4(*a)),
                InfoVxlan::Group6(a) => remote = Some(IpAddr::V6(*a)),
                InfoVxlan::Port(p) => port = Some(*p),
                _ => {}
            }
        }
        Some(Tunnel {
            vni: vni?,
            remote: remote?,
            port: port?,
        })
    }
}

/// `links::create_veth`, timed as a netlink step of the call.
pub fn create_veth(
    a_ns: &NetnsFd,
    a: &EndSettings,
    b_ns: &NetnsFd,
    b: &EndSettings,
) -> Result<(), NetnsError> {
    step_times::time(step_times::NETLINK, || links::create_veth(a_ns, a, b_ns, b))
}

/// `links::configure`, timed as a netlink step of the call.
pub fn configure(ns: &NetnsFd, end: &EndSettings) -> Result<(), NetnsError> {
    step_times::time(step_times::NETLINK, || links::configure(ns, end))
}

/// Makes a VXLAN device `end.name` in `pod_ns` whose tunnel's socket is in `node_ns` (the
/// request goes from there, and a VXLAN device keeps the namespace it was made in for its
/// underlay wherever it moves), in one request, then applies `end`'s settings and brings
/// it up. A VNI another device of `node_ns` uses on the same port fails the request.
pub fn create_vxlan(
    node_ns: &NetnsFd,
    pod_ns: &NetnsFd,
    end: &EndSettings,
    tunnel: Tunnel,
) -> Result<(), NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let op = format!(
            "add vxlan {}:{} (VNI {}, remote {} port {})",
            pod_ns.label(),
            end.name,
            tunnel.vni,
            tunnel.remote,
            tunnel.port
        );
        let builder = LinkVxlan::new(&end.name, tunnel.vni)
            .port(tunnel.port)
            .learning(false);
        let builder = match tunnel.remote {
            IpAddr::V4(a) => builder.remote(a),
            IpAddr::V6(a) => builder.remote6(a),
        };
        let message = builder.setns_by_fd(pod_ns.file().as_raw_fd()).build();
        node_ns.netlink(
            &op,
            |h| async move { h.link().add(message).execute().await },
        )?;
        let configured = links::configure(pod_ns, end);
        if configured.is_err() {
            links::delete_just_made(pod_ns, &op, &end.name);
        }
        configured
    })
}

/// What `delete` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    Removed,
    /// There is no interface of that name.
    Absent,
    /// The interface of that name is not the one xwire made (its alias differs): left.
    Foreign {
        alias: Option<String>,
    },
}

/// Deletes `name` (a veth takes its peer with it), but only if it carries `alias`, the
/// mark xwire gave it: an interface of the same name that another plugin or the
/// container made is never deleted.
pub fn delete(ns: &NetnsFd, name: &str, alias: &str) -> Result<Removal, NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let op = format!("delete {name}");
        let result = ns.netlink(&op, |h| async move {
            let found = find(&h, name).await?;
            let found_alias = found.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfAlias(a) => Some(a.clone()),
                _ => None,
            });
            if found_alias.as_deref() != Some(alias) {
                return Ok(Removal::Foreign { alias: found_alias });
            }
            h.link().del(found.header.index).execute().await?;
            Ok(Removal::Removed)
        });
        match result {
            Err(e) if e.errno() == Some(ENODEV) => Ok(Removal::Absent),
            other => other,
        }
    })
}

/// The interface group `delete_all` puts what it deletes in: a number nothing else is
/// likely to use ("xwir"), and only for the moment between marking and deleting.
const DELETE_GROUP: u32 = 0x7877_6972;

/// Deletes the interfaces `(name, alias)` of `ns` that carry their alias, in one batch:
/// the kernel unregisters a group of devices with one set of RCU waits, where one
/// request per device waits once per device. Each is first put in `DELETE_GROUP`, then
/// the group is deleted. How many were deleted.
pub(crate) fn delete_all(ns: &NetnsFd, ours: &[(String, String)]) -> Result<usize, NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let ours = ours.to_vec();
        ns.netlink("delete the pod's interfaces", |h| async move {
            let links: Vec<LinkMessage> = h.link().get().execute().try_collect().await?;
            let mut marked = 0;
            for link in links {
                let (mut name, mut alias) = (None, None);
                for attribute in &link.attributes {
                    match attribute {
                        LinkAttribute::IfName(n) => name = Some(n.as_str()),
                        LinkAttribute::IfAlias(a) => alias = Some(a.as_str()),
                        _ => {}
                    }
                }
                let wanted = ours
                    .iter()
                    .any(|(n, a)| Some(n.as_str()) == name && Some(a.as_str()) == alias);
                if !wanted {
                    continue;
                }
                let mut mark = LinkUnspec::new_with_index(link.header.index).build();
                mark.attributes.push(LinkAttribute::Group(DELETE_GROUP));
                h.link().set(mark).execute().await?;
                marked += 1;
            }
            if marked > 0 {
                let mut delete = h.link().del(0);
                delete
                    .message_mut()
                    .attributes
                    .push(LinkAttribute::Group(DELETE_GROUP));
                delete.execute().await?;
            }
            Ok(marked)
        })
    })
}

/// What the kernel says of `name` now; `None` when there is no such interface.
pub fn inspect(ns: &NetnsFd, name: &str) -> Result<Option<InterfaceState>, NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let op = format!("read {name}");
        // Strict: the kernel dumps this interface's addresses only (without it, those of
        // every interface of the namespace, which for a node's is thousands).
        let result = ns.netlink_strict(&op, |h| async move {
            let message = find(&h, name).await?;
            let index = message.header.index;
            let mut request = h.address().get().set_link_index_filter(index);
            request.message_mut().header.index = index;
            let addresses: Vec<_> = request.execute().try_collect().await?;
            Ok((message, addresses))
        });
        let (message, address_messages) = match result {
            Ok(found) => found,
            Err(e) if e.errno() == Some(ENODEV) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut state = InterfaceState {
            up: message.header.flags.contains(LinkFlags::Up),
            mtu: 0,
            mac: [0; 6],
            alias: None,
            addresses: Vec::new(),
            tunnel: Tunnel::of(&message.attributes),
        };
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::Mtu(mtu) => state.mtu = *mtu,
                LinkAttribute::Address(a) if a.len() == 6 => state.mac.copy_from_slice(a),
                LinkAttribute::IfAlias(alias) => state.alias = Some(alias.clone()),
                _ => {}
            }
        }
        for m in address_messages {
            for attribute in m.attributes {
                if let AddressAttribute::Address(addr) = attribute {
                    state.addresses.push((addr, m.header.prefix_len));
                }
            }
        }
        Ok(Some(state))
    })
}

/// Every interface in `ns` as the kernel reports it, by name: two dumps (links, then
/// addresses), for a pass over many interfaces (reconciliation) where asking for each
/// would cost netlink rounds each.
pub(crate) fn observe(ns: &NetnsFd) -> Result<BTreeMap<String, InterfaceState>, NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let (links, addresses): (Vec<LinkMessage>, Vec<AddressMessage>) =
            ns.netlink("list interfaces and addresses", |h| async move {
                let links = h.link().get().execute().try_collect().await?;
                let addresses = h.address().get().execute().try_collect().await?;
                Ok((links, addresses))
            })?;
        let mut by_index: BTreeMap<u32, Vec<(IpAddr, u8)>> = BTreeMap::new();
        for m in addresses {
            for attribute in m.attributes {
                if let AddressAttribute::Address(addr) = attribute {
                    by_index
                        .entry(m.header.index)
                        .or_default()
                        .push((addr, m.header.prefix_len));
                }
            }
        }
        let mut found = BTreeMap::new();
        for link in links {
            let mut state = InterfaceState {
                up: link.header.flags.contains(LinkFlags::Up),
                mtu: 0,
                mac: [0; 6],
                alias: None,
                addresses: by_index.remove(&link.header.index).unwrap_or_default(),
                tunnel: Tunnel::of(&link.attributes),
            };
            let mut name = None;
            for attribute in link.attributes {
                match attribute {
                    LinkAttribute::IfName(n) => name = Some(n),
                    LinkAttribute::Mtu(mtu) => state.mtu = mtu,
                    LinkAttribute::Address(a) if a.len() == 6 => state.mac.copy_from_slice(&a),
                    LinkAttribute::IfAlias(alias) => state.alias = Some(alias),
                    _ => {}
                }
            }
            if let Some(name) = name {
                found.insert(name, state);
            }
        }
        Ok(found)
    })
}

/// Every interface in `ns`, by name, with its alias: one dump, for a pass over many
/// interfaces where asking for each would cost a netlink round each.
pub fn aliases(ns: &NetnsFd) -> Result<HashMap<String, Option<String>>, NetnsError> {
    step_times::time(step_times::NETLINK, || {
        let links: Vec<LinkMessage> = ns.netlink("list interfaces", |h| async move {
            h.link().get().execute().try_collect().await
        })?;
        let mut found = HashMap::new();
        for link in links {
            let mut name = None;
            let mut alias = None;
            for attribute in link.attributes {
                match attribute {
                    LinkAttribute::IfName(n) => name = Some(n),
                    LinkAttribute::IfAlias(a) => alias = Some(a),
                    _ => {}
                }
            }
            if let Some(name) = name {
                found.insert(name, alias);
            }
        }
        Ok(found)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest names Kubernetes allows.
    fn longest() -> (String, String, String) {
        ("n".repeat(253), "s".repeat(63), "p".repeat(253))
    }

    #[test]
    fn names_that_fit_are_written_out_as_they_always_were() {
        assert_eq!(pod_alias("lab", "r1", 7), "xwire:lab/r1/7");
        assert_eq!(pod_alias_prefix("lab", "r1"), "xwire:lab/r1/");
        assert_eq!(node_alias("n1", "lab", "r1", 7), "xwire-node:n1:lab/r1/7");
        assert_eq!(node_alias_prefix("n1"), "xwire-node:n1:");
    }

    #[test]
    fn the_longest_names_make_aliases_the_kernel_keeps_and_tells_apart() {
        let (node, namespace, pod) = longest();
        let other_pod = format!("{}q", "p".repeat(252));
        for uid in [0, u64::MAX] {
            let alias = pod_alias(&namespace, &pod, uid);
            assert!(alias.len() <= MAX_ALIAS, "{}", alias.len());
            assert!(alias.starts_with(&pod_alias_prefix(&namespace, &pod)));
            assert_ne!(alias, pod_alias(&namespace, &other_pod, uid));
            let on_node = node_alias(&node, &namespace, &pod, uid);
            assert!(on_node.len() <= MAX_ALIAS, "{}", on_node.len());
            assert!(on_node.starts_with(&node_alias_prefix(&node)));
            assert_ne!(on_node, node_alias(&node, &namespace, &other_pod, uid));
            assert_ne!(on_node, node_alias("n1", &namespace, &pod, uid));
        }
        // A pod's prefix is not another's: DEL clears one pod's interfaces only.
        assert!(
            !pod_alias(&namespace, &other_pod, 1).starts_with(&pod_alias_prefix(&namespace, &pod))
        );
    }

    #[test]
    fn a_short_node_name_with_a_long_pod_name_still_fits() {
        let (_, namespace, pod) = longest();
        let alias = node_alias("node-1", &namespace, &pod, u64::MAX);
        assert!(alias.len() <= MAX_ALIAS, "{}", alias.len());
        assert!(alias.starts_with("xwire-node:node-1:"), "{alias}");
    }
}
