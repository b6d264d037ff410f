//! The lab's management network: every pod gets an interface (`eth0` unless the lab file
//! says otherwise) on its node's management bridge, with an IPv4 and an IPv6 address, and
//! the nodes' bridges hang off one bridge on the host, which has the first address of
//! each subnet. So the host reaches every pod, and every pod the host and the other pods,
//! on one link, as a containerlab management network does; the wires stay free for the
//! lab's own traffic.
//!
//! Names: on the host, the bridge `xmHHHHHHHH` (a hash of the lab's name; Linux allows 15
//! characters, a lab name may have 24) and its ports `xmHHHHHHHH.I` to node I; in node
//! I's namespace, `mgmt0` with the uplink `mgmt-up` and a port `mgN` per pod, N the pod's
//! host number. A bridge takes at most 1,024 ports, so pods numbered past the first
//! thousand hang off further bridges `mgmtK` (K = (N-2)/1000), each made in the node when
//! its first pod comes and joined to `mgmt0` by a veth (`mgmt-iK` on mgmt0, `mgmt-jK` on
//! mgmtK). Addresses: the host `.1`, pod P `.N`, where N is kept in the lab's
//! record, so a pod keeps its addresses across `lab edit` and daemon restarts.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use futures::TryStreamExt;
use netlink_packet_route::link::{InfoBridge, LinkAttribute};
use xwire_model::lab::mgmt::{room, FIRST_POD_HOST};
use xwire_netns::links::{create_veth, EndSettings, Ipv6};
use xwire_netns::NetnsFd;

use super::file::Lab;
use super::namespaces;
use super::netdev::{add_addresses, attach, link_exists, make_bridge_with};
use super::paths::LabPaths;

const NODE_BRIDGE: &str = "mgmt0";
const NODE_UPLINK: &str = "mgmt-up";
/// Pods per node bridge: the kernel refuses a bridge's 1,025th port (BR_MAX_PORTS, "Exchange
/// full"), and mgmt0 also holds the uplink and a link to each further bridge.
const PODS_PER_BRIDGE: u32 = 1000;
/// Where a lab without `ipv4_subnet` gets its /20 (4094 addresses): the first one of
/// these that no other lab uses and no route of the host's overlaps.
const AUTO_IPV4: (Ipv4Addr, u8) = (Ipv4Addr::new(172, 20, 0, 0), 14);
const AUTO_IPV4_PREFIX: u8 = 20;
/// And its IPv6 /64: `fd78:7769:7265:K::/64` for the K-th /20 above.
const AUTO_IPV6: [u16; 3] = [0xfd78, 0x7769, 0x7265];

/// The host bridge's name for lab `name`.
pub(crate) fn host_bridge(name: &str) -> String {
    format!("xm{:08x}", xwire_proto::fnv1a32(name.as_bytes()))
}

fn bridge_alias(lab: &str) -> String {
    format!("xwire-lab:{lab}")
}

/// Picks the subnets the lab file left to the lab: the first /20 of 172.20.0.0/14 (and
/// its /64) that no other lab's record names and that no route on the host overlaps.
pub(crate) fn pick_subnets(lab: &mut Lab) -> Result<()> {
    let Some(mgmt) = &mut lab.mgmt else {
        return Ok(());
    };
    let taken = taken_subnets(&lab.name)?;
    let blocks = 1u32 << (AUTO_IPV4_PREFIX - AUTO_IPV4.1);
    let free = (0..blocks).find(|k| {
        let v4 = IpAddr::V4(Ipv4Addr::from(
            u32::from(AUTO_IPV4.0) + (k << (32 - u32::from(AUTO_IPV4_PREFIX))),
        ));
        let v6 = auto_ipv6(*k);
        !taken
            .iter()
            .any(|t| overlaps(*t, (v4, AUTO_IPV4_PREFIX)) || overlaps(*t, (v6, 64)))
    });
    let Some(k) = free else {
        bail!(
            "no free management subnet in {}/{}: give the lab one (mgmt: {{ipv4_subnet: ...}})",
            AUTO_IPV4.0,
            AUTO_IPV4.1
        );
    };
    if mgmt.ipv4_subnet.is_none() {
        let v4 = Ipv4Addr::from(u32::from(AUTO_IPV4.0) + (k << (32 - u32::from(AUTO_IPV4_PREFIX))));
        mgmt.ipv4_subnet = Some(format!("{v4}/{AUTO_IPV4_PREFIX}"));
    }
    if mgmt.ipv6_subnet.is_none() {
        mgmt.ipv6_subnet = Some(format!("{}/64", auto_ipv6(k)));
    }
    let ((v4, p4), (v6, p6)) = mgmt.subnets().map_err(anyhow::Error::msg)?;
    for subnet in [(v4, p4), (v6, p6)] {
        if room(subnet) < lab.pods.len() as u64 {
            bail!(
                "the management subnet {}/{} has room for {} pods, the lab has {}: give it a larger one (mgmt: {{ipv4_subnet: ...}})",
                subnet.0, subnet.1, room(subnet), lab.pods.len()
            );
        }
    }
    for given in [(v4, p4), (v6, p6)] {
        if let Some(t) = taken.iter().find(|t| overlaps(**t, given)) {
            bail!(
                "the management subnet {}/{} overlaps {}/{}, which another lab or a route of this host uses",
                given.0, given.1, t.0, t.1
            );
        }
    }
    Ok(())
}

fn auto_ipv6(k: u32) -> IpAddr {
    let [a, b, c] = AUTO_IPV6;
    IpAddr::V6(Ipv6Addr::new(a, b, c, k as u16, 0, 0, 0, 0))
}

fn overlaps(a: (IpAddr, u8), b: (IpAddr, u8)) -> bool {
    let net = |(address, prefix)| ipnet::IpNet::new(address, prefix).ok();
    match (net(a), net(b)) {
        (Some(a), Some(b)) => a.contains(&b.network()) || b.contains(&a.network()),
        _ => false,
    }
}

/// The subnets other labs' records name and the host's routes (other than default
/// routes) cover.
fn taken_subnets(this_lab: &str) -> Result<Vec<(IpAddr, u8)>> {
    let mut taken = Vec::new();
    for other in super::paths::labs_up() {
        if other == this_lab {
            continue;
        }
        if let Ok(lab) = super::status::read_lab(&other) {
            if let Some(mgmt) = lab.mgmt {
                if let Ok((v4, v6)) = mgmt.subnets() {
                    taken.extend([v4, v6]);
                }
            }
        }
    }
    let host = NetnsFd::open(Path::new("/proc/self/ns/net"))?;
    let routes = host.netlink("read the host's routes", |h| async move {
        use netlink_packet_route::route::{RouteAddress, RouteAttribute};
        let mut found = Vec::new();
        for dump in [
            rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().build(),
            rtnetlink::RouteMessageBuilder::<Ipv6Addr>::new().build(),
        ] {
            let routes: Vec<_> = h.route().get(dump).execute().try_collect().await?;
            for route in routes {
                let prefix = route.header.destination_prefix_length;
                for attribute in &route.attributes {
                    let dst = match attribute {
                        RouteAttribute::Destination(RouteAddress::Inet(a)) => IpAddr::V4(*a),
                        RouteAttribute::Destination(RouteAddress::Inet6(a)) => IpAddr::V6(*a),
                        _ => continue,
                    };
                    // Link-local and multicast routes are every host's.
                    let everyone = match dst {
                        IpAddr::V6(a) => {
                            a.segments()[0] & 0xff00 == 0xff00 || a.segments()[0] & 0xffc0 == 0xfe80
                        }
                        IpAddr::V4(a) => a.is_multicast() || a.is_loopback(),
                    };
                    if prefix > 0 && !everyone {
                        found.push((dst, prefix));
                    }
                }
            }
        }
        Ok(found)
    })?;
    taken.extend(routes);
    Ok(taken)
}

/// Makes the host's bridge and each node's, joined.
pub(crate) fn build_nodes(lab: &Lab, paths: &LabPaths) -> Result<()> {
    let Some(mgmt) = &lab.mgmt else {
        return Ok(());
    };
    let host = NetnsFd::open(Path::new("/proc/self/ns/net"))?;
    let bridge = host_bridge(&lab.name);
    let ((v4, p4), (v6, p6)) = mgmt.host(1).map_err(anyhow::Error::msg)?;
    make_bridge_with(
        &host,
        &bridge,
        None,
        Some(&bridge_alias(&lab.name)),
        multicast_off(),
    )?;
    add_addresses(&host, &bridge, &[(v4, p4), (v6, p6)])?;
    for (index, node) in lab.nodes.iter().enumerate() {
        let node_ns = namespaces::open(&paths.node_netns(node))?;
        make_bridge_with(&node_ns, NODE_BRIDGE, None, None, multicast_off())?;
        drop_chatter(&node_ns)?;
        let host_end = format!("{bridge}.{index}");
        create_veth(
            &host,
            &EndSettings::named(&host_end),
            &node_ns,
            &EndSettings::named(NODE_UPLINK),
        )?;
        attach(&host, &host_end, &bridge)?;
        attach(&node_ns, NODE_UPLINK, NODE_BRIDGE)?;
    }
    Ok(())
}

/// The management network carries no multicast routing: no querier, no multicast router,
/// and bridges that do not snoop, so every multicast frame goes to every port, which is
/// all that neighbour discovery needs. What a pod's IPv6 sends on its own is then of use
/// to nobody, yet each such frame reached every other pod of the lab, and the set-up grew
/// with the square of the pods (at 3,000 pods the machine spent most of it receiving
/// MLD reports). A node's bridge drops them as they come in, before it floods them to
/// every port (nftables: the kernel's bridge has no switch for it), a rule and a counter
/// each (`ip netns exec xl.LAB.n.NODE nft list table bridge xwire-mgmt`):
/// - MLD reports, which each address sends when it joins its groups;
/// - router solicitations: the network has no router;
/// - duplicate address probes (a neighbour solicitation from `::`): the lab gives every
///   address, and each pod's link-local one comes from its own random MAC.
fn multicast_off() -> Vec<InfoBridge> {
    vec![InfoBridge::MulticastSnooping(false)]
}

const DROP_CHATTER: &str = "table bridge xwire-mgmt {
    chain prerouting {
        type filter hook prerouting priority 0; policy accept;
        icmpv6 type { mld-listener-report, mld-listener-done, mld2-listener-report } counter drop comment \"mld reports\"
        icmpv6 type nd-router-solicit counter drop comment \"router solicitations\"
        ip6 saddr :: icmpv6 type nd-neighbor-solicit counter drop comment \"duplicate address probes\"
    }
}
";

fn drop_chatter(node_ns: &NetnsFd) -> Result<()> {
    node_ns.run("drop the pods' IPv6 chatter", || -> Result<()> {
        let mut nft = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("run nft (apt-get install nftables)")?;
        nft.stdin
            .take()
            .context("nft's standard input")?
            .write_all(DROP_CHATTER.as_bytes())?;
        let out = nft.wait_with_output()?;
        if !out.status.success() {
            bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    })?
}

/// Gives `pod` its management interface and addresses. `node_ns` is the pod's node's
/// namespace, opened once for all its pods: a handle opens the namespace's
/// `/proc/sys/net/ipv6/conf` on first use, and that walk passes one directory entry per
/// network namespace on the machine.
pub(crate) fn add_pod(lab: &Lab, paths: &LabPaths, pod: &str, node_ns: &NetnsFd) -> Result<()> {
    let Some(mgmt) = &lab.mgmt else {
        return Ok(());
    };
    let n = *mgmt
        .hosts
        .get(pod)
        .with_context(|| format!("pod {pod} has no management address"))?;
    let ((v4, p4), (v6, p6)) = mgmt.host(n).map_err(anyhow::Error::msg)?;
    let pod_ns = namespaces::open(&paths.pod_netns(pod))?;
    let port = format!("mg{n}");
    // The pod's end keeps its namespace's IPv6 settings: its solicitations and probes
    // stop at the node's bridge (`DROP_CHATTER`), and its addresses skip the probe
    // (`add_addresses`). Writing the settings there instead cost a walk of every
    // namespace's sysctl directory per pod: at 5,000 pods, a third of the machine.
    let mut pod_end = EndSettings::named(&mgmt.interface);
    pod_end.address = Some((v4, p4));
    // The node's end is a bridge port: no addresses, and no IPv6 chatter of its own.
    let node_end = EndSettings {
        ipv6: Ipv6::Off,
        ..EndSettings::named(&port)
    };
    create_veth(&pod_ns, &pod_end, node_ns, &node_end)
        .with_context(|| format!("pod {pod}: management interface"))?;
    add_addresses(&pod_ns, &mgmt.interface, &[(v6, p6)])?;
    let bridge = node_bridge(n);
    ensure_node_bridge(node_ns, &bridge)?;
    attach(node_ns, &port, &bridge)
}

/// The node bridge that the pod with host number `n` hangs off.
fn node_bridge(n: u32) -> String {
    format!("mgmt{}", n.saturating_sub(FIRST_POD_HOST) / PODS_PER_BRIDGE)
}

/// Makes `bridge` in the node, joined to `mgmt0`, unless it is there (`mgmt0` always is).
fn ensure_node_bridge(node_ns: &NetnsFd, bridge: &str) -> Result<()> {
    if bridge == NODE_BRIDGE || link_exists(node_ns, bridge)? {
        return Ok(());
    }
    let k = bridge.trim_start_matches("mgmt");
    make_bridge_with(node_ns, bridge, None, None, multicast_off())?;
    let (on_first, on_this) = (format!("mgmt-i{k}"), format!("mgmt-j{k}"));
    let end = |name: &str| EndSettings {
        ipv6: Ipv6::Off,
        ..EndSettings::named(name)
    };
    create_veth(node_ns, &end(&on_first), node_ns, &end(&on_this))
        .with_context(|| format!("join {bridge} to {NODE_BRIDGE}"))?;
    attach(node_ns, &on_first, NODE_BRIDGE)?;
    attach(node_ns, &on_this, bridge)
}

/// Takes `pod`'s management interface away (an edit that removes the pod: its number
/// may go to a pod the same edit adds, before the old pod's namespace is gone).
pub(crate) fn remove_pod(lab: &Lab, paths: &LabPaths, pod: &str) -> Result<()> {
    let (Some(mgmt), Some(node)) = (&lab.mgmt, lab.pods.get(pod)) else {
        return Ok(());
    };
    let Some(n) = mgmt.hosts.get(pod) else {
        return Ok(());
    };
    let node_ns = namespaces::open(&paths.node_netns(node))?;
    let port = format!("mg{n}");
    node_ns.netlink(&format!("remove {port}"), |h| async move {
        if let Some(link) = h
            .link()
            .get()
            .match_name(port)
            .execute()
            .try_next()
            .await
            .ok()
            .flatten()
        {
            h.link().del(link.header.index).execute().await?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Removes the lab's bridge in the host's namespace and the host ends of its nodes'
/// veths (`<bridge>.<index>`), each by netlink, so that they are gone when this returns.
/// Left to the kernel, which destroys a removed namespace's interfaces (and with them
/// their veths' other ends) in a work item some time later, the host ends outlived a
/// `lab down` by up to seconds, and a `lab up` of the same lab right after it failed
/// with "File exists".
pub(crate) fn remove_host_side(name: &str) {
    let Ok(host) = NetnsFd::open(Path::new("/proc/self/ns/net")) else {
        return;
    };
    let bridge = host_bridge(name);
    let alias = bridge_alias(name);
    let removed = host.netlink("remove the management network", |h| async move {
        let links: Vec<_> = h.link().get().execute().try_collect().await?;
        let name_of = |link: &netlink_packet_route::link::LinkMessage| {
            link.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(n) => Some(n.clone()),
                _ => None,
            })
        };
        let ours_bridge = links.iter().find(|link| {
            name_of(link).as_deref() == Some(bridge.as_str())
                && (link.attributes.iter())
                    .any(|a| matches!(a, LinkAttribute::IfAlias(a) if *a == alias))
        });
        let bridge_index = ours_bridge.map(|b| b.header.index);
        let node_end = format!("{bridge}.");
        for link in &links {
            let enslaved = bridge_index.is_some_and(|index| {
                (link.attributes.iter())
                    .any(|a| matches!(a, LinkAttribute::Controller(c) if *c == index))
            });
            // The name alone where the bridge is gone already (a `down` cut short): it
            // holds the lab's own name's hash, which no other lab's has.
            let named = name_of(link).is_some_and(|n| {
                n.strip_prefix(&node_end)
                    .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            });
            if enslaved || named {
                match h.link().del(link.header.index).execute().await {
                    // Gone with its namespace meanwhile.
                    Err(rtnetlink::Error::NetlinkError(e))
                        if e.raw_code() == -(nix::errno::Errno::ENODEV as i32) => {}
                    other => other?,
                }
            }
        }
        if let Some(bridge) = bridge_index {
            h.link().del(bridge).execute().await?;
        }
        Ok(())
    });
    if let Err(e) = removed {
        eprintln!("lab {name}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_overlap_by_their_shorter_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(overlaps((ip("172.20.0.0"), 20), (ip("172.20.5.0"), 24)));
        assert!(!overlaps((ip("172.20.0.0"), 20), (ip("172.20.16.0"), 20)));
        assert!(!overlaps((ip("172.20.0.0"), 20), (ip("fd78::"), 64)));
    }

    #[test]
    fn a_thousand_pods_hang_off_each_node_bridge() {
        assert_eq!(node_bridge(FIRST_POD_HOST), "mgmt0");
        assert_eq!(node_bridge(FIRST_POD_HOST + 999), "mgmt0");
        assert_eq!(node_bridge(FIRST_POD_HOST + 1000), "mgmt1");
        assert_eq!(node_bridge(20_001), "mgmt19");
    }

    #[test]
    fn bridge_names_fit_linux_and_differ_between_labs() {
        let a = host_bridge("a-very-long-lab-name-abc");
        assert!(a.len() <= 15 - 4, "{a}: room for .NNN");
        assert_ne!(a, host_bridge("a-very-long-lab-name-abd"));
    }
}
