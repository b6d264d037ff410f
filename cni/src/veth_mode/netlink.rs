//! Makes, checks and removes what `super::plan` describes, with rtnetlink: the node's
//! side from the plugin's own namespace (the runtime runs it in the node's), the pod's
//! from a thread that has entered the pod's namespace.

use std::future::Future;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;

use futures::TryStreamExt;
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkMessage};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourState};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope,
};
use rtnetlink::{Handle, IpVersion, LinkMessageBuilder, LinkUnspec, RouteMessageBuilder};
use xwire_netns::{NetnsError, NetnsFd};

use super::plan::{self, Plan, Route, VethMode, PROTOCOL};

/// What ADD made, for the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Made {
    pub node_interface: String,
    pub node_mac: String,
    pub pod_mac: String,
}

/// One attachment's veth: who it is for and what it should carry.
pub struct Attachment<'a> {
    pub netns: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub pod_ips: &'a [IpAddr],
}

/// Why veth mode could not do its part: the caller's `CNI_NETNS` (its fault, or a
/// shortage of descriptors: the caller picks the CNI code from which), or anything after.
#[derive(Debug, thiserror::Error)]
pub enum VethError {
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("{0}")]
    Failed(String),
}

impl From<String> for VethError {
    fn from(failure: String) -> VethError {
        VethError::Failed(failure)
    }
}

/// The pod's namespace, `CNI_NETNS`: opened once per call, before anything is made, as
/// `NetnsFd` opens any (nothing but a network namespace is opened for reading, so a FIFO
/// at the path cannot hang the call), and that descriptor used throughout (the path is
/// not looked up again).
fn open_pod_netns(at: &Attachment) -> Result<NetnsFd, NetnsError> {
    NetnsFd::open(Path::new(at.netns))
}

/// Runs `f` with a netlink handle in `netns` (`None`: this one), on a thread of its own so
/// that this thread's namespace never changes.
fn in_netns<T, F, Fut>(netns: Option<&NetnsFd>, f: F) -> Result<T, String>
where
    T: Send,
    F: FnOnce(Handle) -> Fut + Send,
    Fut: Future<Output = Result<T, String>>,
{
    std::thread::scope(|scope| {
        scope
            .spawn(move || {
                if let Some(ns) = netns {
                    xwire_netns::enter(ns.file().as_fd())
                        .map_err(|e| format!("enter the pod's namespace: {e}"))?;
                }
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime.block_on(async {
                    let (connection, handle, _) =
                        rtnetlink::new_connection().map_err(|e| e.to_string())?;
                    let driver = tokio::spawn(connection);
                    let result = f(handle).await;
                    driver.abort();
                    result
                })
            })
            .join()
            .unwrap_or_else(|_| Err("the netlink thread panicked".into()))
    })
}

/// The node's addresses on the interface of its default route (IPv4 and IPv6, global
/// scope), which is what the pod reaches the node by unless `nodeAddresses` says.
pub(crate) fn default_node_addresses() -> Result<Vec<IpAddr>, String> {
    in_netns(None, |h| async move {
        let mut found = Vec::new();
        for dump in [
            RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
            RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
        ] {
            let routes: Vec<RouteMessage> = h
                .route()
                .get(dump)
                .execute()
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            let default_dev = routes.iter().find_map(|r| {
                let main = r.header.table == 254;
                (main && r.header.destination_prefix_length == 0).then(|| {
                    r.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Oif(i) => Some(*i),
                        _ => None,
                    })
                })?
            });
            let Some(index) = default_dev else { continue };
            let addresses: Vec<_> = h
                .address()
                .get()
                .set_link_index_filter(index)
                .execute()
                .try_collect()
                .await
                .map_err(|e| e.to_string())?;
            for address in addresses {
                if address.header.scope != netlink_packet_route::address::AddressScope::Universe {
                    continue;
                }
                let ip = address.attributes.iter().find_map(|a| match a {
                    netlink_packet_route::address::AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                });
                if let Some(ip) = ip.filter(|ip| !found.contains(ip)) {
                    found.push(ip);
                }
            }
        }
        Ok(found)
    })
}

/// Makes the veth, routes, neighbours and `rp_filter` settings; on failure, takes away
/// whatever it made (the node end of the veth takes the rest with it).
pub fn add(mode: &VethMode, at: &Attachment, node_addresses: &[IpAddr]) -> Result<Made, VethError> {
    // Before anything is made or removed: a `CNI_NETNS` that is no network namespace is
    // the caller's mistake, and says so.
    let pod_ns = open_pod_netns(at)?;
    let plan = plan::plan(mode, at.pod_ips, node_addresses);
    let node_if = plan::node_interface(at.container_id, at.ifname);
    let alias = plan::node_alias(at.container_id, at.ifname);
    // A runtime that repeats an ADD finds the last one's veth: it is made anew.
    del(at.container_id, at.ifname)?;
    let made = make(mode, at, &pod_ns, &plan, &node_if, &alias);
    if made.is_err() {
        let _ = del(at.container_id, at.ifname);
    }
    Ok(made?)
}

fn make(
    mode: &VethMode,
    at: &Attachment,
    pod_ns: &NetnsFd,
    plan: &Plan,
    node_if: &str,
    alias: &str,
) -> Result<Made, String> {
    let node_mac = make_pair(mode, pod_ns, node_if, alias)?;
    let pod_mac = set_up_pod_end(mode, at, pod_ns, plan, &node_mac)?;
    set_up_node_end(mode, plan, node_if, &pod_mac)?;
    Ok(Made {
        node_interface: node_if.to_owned(),
        node_mac,
        pod_mac,
    })
}

/// Makes the veth pair, its pod end in the pod's namespace, and brings the node end up
/// with its alias. Returns the node end's MAC.
fn make_pair(
    mode: &VethMode,
    pod_ns: &NetnsFd,
    node_if: &str,
    alias: &str,
) -> Result<String, String> {
    let (node_if_owned, alias, pod_if, mtu) = (
        node_if.to_owned(),
        alias.to_owned(),
        mode.pod_interface.clone(),
        mode.mtu,
    );
    let fd = pod_ns.file().as_raw_fd();
    // `pod_ns` stays open (and `fd` valid) until the call returns.
    in_netns(None, |h| async move {
        let peer = LinkUnspec::new_with_name(&pod_if).setns_by_fd(fd).build();
        let message = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
            .name(node_if_owned.clone())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        h.link()
            .add(message)
            .execute()
            .await
            .map_err(|e| format!("add veth {node_if_owned}: {e}"))?;
        let link = find(&h, &node_if_owned)
            .await?
            .ok_or("the new veth is gone")?;
        let mut set = LinkUnspec::new_with_index(link.header.index).up();
        if let Some(mtu) = mtu {
            set = set.mtu(mtu);
        }
        let mut message = set.build();
        message.attributes.push(LinkAttribute::IfAlias(alias));
        h.link()
            .set(message)
            .execute()
            .await
            .map_err(|e| format!("set {node_if_owned} up: {e}"))?;
        mac_of(&link).ok_or_else(|| "the node end has no MAC".to_owned())
    })
}

/// Brings the pod end up, with its neighbours (the node end's MAC), routes and
/// `rp_filter`. Returns the pod end's MAC.
fn set_up_pod_end(
    mode: &VethMode,
    at: &Attachment,
    pod_ns: &NetnsFd,
    plan: &Plan,
    node_mac: &str,
) -> Result<String, String> {
    let pod_plan = plan.clone();
    let (pod_if, node_mac_bytes) = (mode.pod_interface.clone(), parse_mac(node_mac));
    let (rp_filter, primary, mtu) = (mode.rp_filter, at.ifname.to_owned(), mode.mtu);
    in_netns(Some(pod_ns), |h| async move {
        let link = find(&h, &pod_if).await?.ok_or("the pod end is gone")?;
        let index = link.header.index;
        let mut set = LinkUnspec::new_with_index(index).up();
        if let Some(mtu) = mtu {
            set = set.mtu(mtu);
        }
        h.link()
            .set(set.build())
            .execute()
            .await
            .map_err(|e| format!("set {pod_if} up: {e}"))?;
        for &node in &pod_plan.pod_neighbours {
            add_neighbour(&h, index, node, &node_mac_bytes).await?;
        }
        for route in &pod_plan.pod_routes {
            add_route(&h, index, route).await?;
        }
        for ifname in ["all", pod_if.as_str(), primary.as_str()] {
            // `all` only ever loosens here: the kernel uses the larger of `all` and the
            // interface's own.
            if ifname == "all" && rp_filter != 0 {
                continue;
            }
            set_rp_filter(ifname, rp_filter)?;
        }
        mac_of(&link).ok_or_else(|| "the pod end has no MAC".to_owned())
    })
}

/// Gives the node end its neighbours (the pod end's MAC), routes and `rp_filter`.
fn set_up_node_end(
    mode: &VethMode,
    plan: &Plan,
    node_if: &str,
    pod_mac: &str,
) -> Result<(), String> {
    let node_plan = plan.clone();
    let (node_if_owned, pod_mac_bytes) = (node_if.to_owned(), parse_mac(pod_mac));
    let rp_filter = mode.rp_filter;
    in_netns(None, |h| async move {
        let index = find(&h, &node_if_owned)
            .await?
            .ok_or("the node end is gone")?
            .header
            .index;
        for &ip in &node_plan.node_neighbours {
            add_neighbour(&h, index, ip, &pod_mac_bytes).await?;
        }
        for route in &node_plan.node_routes {
            add_route(&h, index, route).await?;
        }
        set_rp_filter(&node_if_owned, rp_filter)
    })
}

/// Removes the node end of the attachment's veth (which takes the pod end, and every
/// route and neighbour through either, with it). Absent is fine; an interface of that
/// name that is not this attachment's is left.
pub fn del(container_id: &str, ifname: &str) -> Result<(), String> {
    let node_if = plan::node_interface(container_id, ifname);
    let alias = plan::node_alias(container_id, ifname);
    in_netns(None, |h| async move {
        let Some(link) = find(&h, &node_if).await? else {
            return Ok(());
        };
        if alias_of(&link).as_deref() != Some(alias.as_str()) {
            return Ok(());
        }
        h.link()
            .del(link.header.index)
            .execute()
            .await
            .map_err(|e| format!("delete {node_if}: {e}"))
    })
}

/// What is missing or wrong, each said; empty when all is in place.
pub fn check(
    mode: &VethMode,
    at: &Attachment,
    node_addresses: &[IpAddr],
) -> Result<Vec<String>, VethError> {
    let pod_ns = open_pod_netns(at)?;
    let plan = plan::plan(mode, at.pod_ips, node_addresses);
    let node_if = plan::node_interface(at.container_id, at.ifname);
    let alias = plan::node_alias(at.container_id, at.ifname);
    let node_plan = plan.clone();
    let node_if_owned = node_if.clone();
    let (mut problems, node_mac) = in_netns(None, |h| async move {
        let mut problems = Vec::new();
        let Some(link) = find(&h, &node_if_owned).await? else {
            return Ok((
                vec![format!(
                    "the node end {node_if_owned} of the veth is missing"
                )],
                None,
            ));
        };
        if alias_of(&link).as_deref() != Some(alias.as_str()) {
            problems.push(format!("{node_if_owned} is not this attachment's veth"));
        }
        let side = Side {
            who: "the node",
            ifname: &node_if_owned,
            index: link.header.index,
        };
        side.check(
            &h,
            &node_plan.node_routes,
            &node_plan.node_neighbours,
            None,
            &mut problems,
        )
        .await?;
        Ok((problems, mac_of(&link)))
    })?;
    let pod_if = mode.pod_interface.clone();
    let (rp_filter, primary) = (mode.rp_filter, at.ifname.to_owned());
    let pod_problems = in_netns(Some(&pod_ns), |h| async move {
        let mut problems = Vec::new();
        let Some(link) = find(&h, &pod_if).await? else {
            return Ok(vec![format!("the pod has no {pod_if}")]);
        };
        let side = Side {
            who: "the pod",
            ifname: &pod_if,
            index: link.header.index,
        };
        side.check(
            &h,
            &plan.pod_routes,
            &plan.pod_neighbours,
            node_mac.as_deref(),
            &mut problems,
        )
        .await?;
        for ifname in [pod_if.as_str(), primary.as_str()] {
            match read_rp_filter(ifname) {
                Some(v) if v == rp_filter => {}
                found => problems.push(format!(
                    "rp_filter of the pod's {ifname} is {found:?}, not {rp_filter}"
                )),
            }
        }
        Ok(problems)
    })?;
    problems.extend(pod_problems);
    Ok(problems)
}

/// One side of the veth, as CHECK looks at it.
struct Side<'a> {
    /// "the node" or "the pod", for the messages.
    who: &'static str,
    ifname: &'a str,
    index: u32,
}

impl Side<'_> {
    /// Adds to `problems` each of `routes` through the side's interface that is missing,
    /// and each of `neighbours` that is not a permanent entry on it (or, with `mac`, not
    /// at that MAC).
    async fn check(
        &self,
        h: &Handle,
        routes: &[Route],
        neighbours: &[IpAddr],
        mac: Option<&str>,
        problems: &mut Vec<String>,
    ) -> Result<(), String> {
        let (who, ifname) = (self.who, self.ifname);
        let found = routes_through(h, self.index).await?;
        for route in routes.iter().filter(|r| !found.contains(r)) {
            problems.push(format!(
                "{who} has no route {} dev {ifname}",
                describe(route)
            ));
        }
        let entries = permanent_neighbours(h, self.index).await?;
        for ip in neighbours {
            match entries.iter().find(|(n, _)| n == ip) {
                None => problems.push(format!("{who} has no permanent neighbour {ip} on {ifname}")),
                Some((_, at)) if mac.is_some_and(|m| m != at) => problems.push(format!(
                    "{who}'s neighbour {ip} is at {at}, not the other end's MAC"
                )),
                Some(_) => {}
            }
        }
        Ok(())
    }
}

fn describe(route: &Route) -> String {
    let mut text = format!("{}/{}", route.dst.0, route.dst.1);
    if let Some(via) = route.via {
        text += &format!(" via {via}");
    }
    if let Some(src) = route.src {
        text += &format!(" src {src}");
    }
    text
}

async fn find(h: &Handle, name: &str) -> Result<Option<LinkMessage>, String> {
    match h
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await
    {
        Ok(found) => Ok(found),
        Err(rtnetlink::Error::NetlinkError(e))
            if e.code.map(|c| -c.get()) == Some(libc::ENODEV) =>
        {
            Ok(None)
        }
        Err(e) => Err(format!("look for {name}: {e}")),
    }
}

fn alias_of(link: &LinkMessage) -> Option<String> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfAlias(alias) => Some(alias.clone()),
        _ => None,
    })
}

fn mac_of(link: &LinkMessage) -> Option<String> {
    link.attributes.iter().find_map(|a| match a {
        LinkAttribute::Address(bytes) if bytes.len() == 6 => Some(
            bytes
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
        ),
        _ => None,
    })
}

/// The bytes of a MAC that `mac_of` wrote (so always six; none for anything else).
fn parse_mac(mac: &str) -> Vec<u8> {
    mac.parse::<macaddr::MacAddr6>()
        .map(|m| m.into_array().to_vec())
        .unwrap_or_default()
}

async fn add_neighbour(h: &Handle, index: u32, ip: IpAddr, mac: &[u8]) -> Result<(), String> {
    h.neighbours()
        .add(index, ip)
        .link_layer_address(mac)
        .state(NeighbourState::Permanent)
        .replace()
        .execute()
        .await
        .map_err(|e| format!("neighbour {ip}: {e}"))
}

async fn add_route(h: &Handle, index: u32, route: &Route) -> Result<(), String> {
    let (dst, prefix) = route.dst;
    let mut builder = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(dst, prefix)
        .map_err(|e| e.to_string())?
        .output_interface(index)
        .protocol(RouteProtocol::from(PROTOCOL));
    // An IPv6 source is refused while duplicate address detection runs; the pod's
    // only global address is picked anyway.
    if let Some(src) = route.src.filter(IpAddr::is_ipv4) {
        builder = builder.pref_source(src).map_err(|e| e.to_string())?;
    }
    builder = match route.via {
        Some(via) => builder.gateway(via).map_err(|e| e.to_string())?,
        None => builder.scope(RouteScope::Link),
    };
    h.route()
        .add(builder.build())
        .replace()
        .execute()
        .await
        .map_err(|e| format!("route {}: {e}", describe(route)))
}

/// xwire's routes through interface `index`, in the main table.
async fn routes_through(h: &Handle, index: u32) -> Result<Vec<Route>, String> {
    let mut found = Vec::new();
    for version in [IpVersion::V4, IpVersion::V6] {
        let dump = match version {
            IpVersion::V4 => RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
            IpVersion::V6 => RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
        };
        let routes: Vec<RouteMessage> = h
            .route()
            .get(dump)
            .execute()
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        for message in routes {
            if u8::from(message.header.protocol) != PROTOCOL {
                continue;
            }
            let ip = |a: &RouteAddress| match a {
                RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
                RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
                _ => None,
            };
            let (mut dst, mut via, mut src, mut oif) = (None, None, None, None);
            for attribute in &message.attributes {
                match attribute {
                    RouteAttribute::Destination(a) => dst = ip(a),
                    RouteAttribute::Gateway(a) => via = ip(a),
                    RouteAttribute::PrefSource(a) => src = ip(a),
                    RouteAttribute::Oif(i) => oif = Some(*i),
                    _ => {}
                }
            }
            if oif != Some(index) {
                continue;
            }
            let Some(dst) = dst else { continue };
            let route = Route {
                dst: (dst, message.header.destination_prefix_length),
                via,
                src,
            };
            found.push(route);
        }
    }
    // The planned routes name an IPv6 source the kernel was not given: compare without.
    Ok(found
        .into_iter()
        .flat_map(|r| {
            let without = Route {
                src: None,
                ..r.clone()
            };
            [r, without]
        })
        .collect())
}

async fn permanent_neighbours(h: &Handle, index: u32) -> Result<Vec<(IpAddr, String)>, String> {
    let neighbours: Vec<_> = h
        .neighbours()
        .get()
        .execute()
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(neighbours
        .into_iter()
        .filter(|n| n.header.ifindex == index && n.header.state == NeighbourState::Permanent)
        .filter_map(|n| {
            let mut ip = None;
            let mut mac = None;
            for attribute in &n.attributes {
                match attribute {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => {
                        ip = Some(IpAddr::V4(*a))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => {
                        ip = Some(IpAddr::V6(*a))
                    }
                    NeighbourAttribute::LinkLayerAddress(bytes) => {
                        mac = Some(
                            bytes
                                .iter()
                                .map(|b| format!("{b:02x}"))
                                .collect::<Vec<_>>()
                                .join(":"),
                        )
                    }
                    _ => {}
                }
            }
            Some((ip?, mac.unwrap_or_default()))
        })
        .collect())
}

/// Sets `net.ipv4.conf.IFNAME.rp_filter` in the calling thread's namespace (the kernel
/// resolves /proc/sys/net by the opener's namespace).
fn set_rp_filter(ifname: &str, value: u8) -> Result<(), String> {
    let path = format!("/proc/sys/net/ipv4/conf/{ifname}/rp_filter");
    std::fs::write(&path, value.to_string()).map_err(|e| format!("write {path}: {e}"))
}

fn read_rp_filter(ifname: &str) -> Option<u8> {
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{ifname}/rp_filter"))
        .ok()?
        .trim()
        .parse()
        .ok()
}
