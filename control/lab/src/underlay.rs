//! The lab's underlay: how its emulated nodes reach each other. Without pools, every
//! node is on one bridge (`br0` in the lab's namespace, 172.31.0.0/24, node i at .i+1).
//!
//! With pools, each pool has its own bridge (`pK`, 172.31.K+1.0/24 for the K-th pool by
//! name, its nodes at .1, .2, ... in the order the file lists them), and only the
//! gateways reach beyond it, on a WAN bridge (`wan`, 172.30.0.0/16): a gateway of a pool
//! that is not behind NAT at 172.30.0.N; the gateways of the pool behind NAT on a bridge
//! inside a NAT router's namespace (`xl.LAB.g.POOL`, 172.29.K+1.0/24, the router at .1),
//! whose WAN end (172.30.1.K+1) masquerades what they send (nftables). Nothing routes
//! from one pool's bridge to another's but the gateways' tunnels.

use std::net::IpAddr;
use std::process::Command;

use anyhow::{bail, Context, Result};
use xwire_netns::links::{create_veth, EndSettings};
use xwire_netns::NetnsFd;

use super::file::{Lab, LabPool};
use super::namespaces;
use super::netdev::{add_route, attach, make_bridge};
use super::paths::{self, LabPaths, UNDERLAY_MTU};

/// Where a gateway's tunnel listens.
pub(crate) const GATEWAY_PORT: u16 = xwire_model::pools::DEFAULT_GATEWAY_PORT;
/// What the nodes of a lab with pools give their QUIC packets: the tunnel between pools
/// carries packets of the WAN's MTU less its overhead.
pub(crate) const POOLED_UNDERLAY_MTU: u32 =
    UNDERLAY_MTU - xwire_model::pools::TUNNEL_OVERHEAD as u32;
const WAN_BRIDGE: &str = "wan";
const WAN_PREFIX: u8 = 16;

/// The pool `node` is in, with its index (pools by name) and the node's place in it.
fn pool_place<'a>(lab: &'a Lab, node: &str) -> Option<(usize, &'a str, &'a LabPool, usize)> {
    lab.pools.iter().enumerate().find_map(|(k, (name, pool))| {
        let j = pool.nodes.iter().position(|n| n == node)?;
        Some((k, name.as_str(), pool, j))
    })
}

/// `node`'s address on its underlay.
pub fn node_address(lab: &Lab, node: &str) -> String {
    match pool_place(lab, node) {
        Some((k, _, _, j)) => format!("172.31.{}.{}", k + 1, j + 1),
        None => {
            let index = lab.nodes.iter().position(|n| n == node).unwrap_or(0);
            paths::underlay_address(index)
        }
    }
}

/// The pool `node` is in, if the lab has pools.
pub fn pool_of<'a>(lab: &'a Lab, node: &str) -> Option<&'a str> {
    pool_place(lab, node).map(|(_, name, _, _)| name)
}

fn pool_cidr(k: usize) -> String {
    format!("172.31.{}.0/24", k + 1)
}

fn nat_subnet(k: usize) -> String {
    format!("172.29.{}", k + 1)
}

/// Where gateway `node` of pool `pool_index` listens, and (behind NAT) its router.
struct WanEnd {
    address: String,
    prefix: u8,
    /// Behind NAT: the router's address, through which the WAN is reached.
    router: Option<String>,
}

fn wan_end(lab: &Lab, node: &str) -> Option<WanEnd> {
    let (k, _, pool, _) = pool_place(lab, node)?;
    let g = pool.gateways.iter().position(|n| n == node)?;
    if pool.nat {
        return Some(WanEnd {
            address: format!("{}.{}", nat_subnet(k), g + 2),
            prefix: 24,
            router: Some(format!("{}.1", nat_subnet(k))),
        });
    }
    // Numbered across the pools that are not behind NAT, in order.
    let n = lab
        .pools
        .values()
        .filter(|p| !p.nat)
        .flat_map(|p| p.gateways.iter())
        .position(|gw| gw == node)?;
    Some(WanEnd {
        address: format!("172.30.0.{}", n + 1),
        prefix: WAN_PREFIX,
        router: None,
    })
}

/// The MTU a node's daemon gives its QUIC packets.
pub(crate) fn node_underlay_mtu(lab: &Lab) -> u32 {
    if lab.pools.is_empty() {
        UNDERLAY_MTU
    } else {
        POOLED_UNDERLAY_MTU
    }
}

/// The `[pools]` section of `node`'s configuration (empty without pools).
pub(crate) fn pools_toml(lab: &Lab, node: &str) -> String {
    let Some(member_of) = pool_of(lab, node) else {
        return String::new();
    };
    let mut toml = format!("[pools]\nmember_of = \"{member_of}\"\nwan_mtu = {UNDERLAY_MTU}\n");
    for (k, (name, pool)) in lab.pools.iter().enumerate() {
        let gateways: Vec<String> = pool
            .gateways
            .iter()
            .filter_map(|gw| {
                let wan = wan_end(lab, gw)?;
                Some(format!(
                    "{{node = \"{gw}\", address = \"{}\", wan = \"{}:{GATEWAY_PORT}\"}}",
                    node_address(lab, gw),
                    wan.address
                ))
            })
            .collect();
        toml += &format!(
            "[[pools.pool]]\nname = \"{name}\"\ncidrs = [\"{}\"]\nnat = {}\ngateways = [{}]\n",
            pool_cidr(k),
            pool.nat,
            gateways.join(", ")
        );
    }
    toml
}

/// Makes the underlay in the lab's namespace and each node's namespace (made here),
/// calling `step` before each node.
pub fn build(
    lab: &Lab,
    paths: &LabPaths,
    lab_ns: &NetnsFd,
    mut step: impl FnMut(String) -> Result<()>,
) -> Result<()> {
    if lab.pools.is_empty() {
        make_bridge(lab_ns, "br0", Some(UNDERLAY_MTU), None)?;
    } else {
        for k in 0..lab.pools.len() {
            make_bridge(lab_ns, &format!("p{k}"), Some(UNDERLAY_MTU), None)?;
        }
        make_bridge(lab_ns, WAN_BRIDGE, Some(UNDERLAY_MTU), None)?;
        for (k, (name, pool)) in lab.pools.iter().enumerate() {
            if pool.nat {
                nat_router(paths, lab_ns, k, name)?;
            }
        }
    }
    for (index, node) in lab.nodes.iter().enumerate() {
        step(format!("node {node}: namespace"))?;
        let node_ns = namespaces::create(&paths.node_netns(node))?;
        let bridge = match pool_place(lab, node) {
            Some((k, ..)) => format!("p{k}"),
            None => "br0".into(),
        };
        let prefix = 24;
        let address = node_address(lab, node);
        plug(
            lab_ns,
            &format!("n{index}"),
            &bridge,
            &node_ns,
            "underlay0",
            (&address, prefix),
        )?;
        if let Some(wan) = wan_end(lab, node) {
            match &wan.router {
                None => plug(
                    lab_ns,
                    &format!("w{index}"),
                    WAN_BRIDGE,
                    &node_ns,
                    "wan0",
                    (&wan.address, wan.prefix),
                )?,
                Some(router) => {
                    let (_, pool_name, ..) = pool_place(lab, node).expect("a gateway is in a pool");
                    let nat_ns = namespaces::open(&paths.nat_netns(pool_name))?;
                    plug(
                        &nat_ns,
                        &format!("g{index}"),
                        "br0",
                        &node_ns,
                        "wan0",
                        (&wan.address, wan.prefix),
                    )?;
                    let wan_net: IpAddr = "172.30.0.0".parse()?;
                    add_route(&node_ns, (wan_net, WAN_PREFIX), router.parse()?)?;
                }
            }
        }
    }
    Ok(())
}

/// A veth from `bridge` in `bridge_ns` (port `port`) to `ifname` in `node_ns`, with
/// `address` on the node's end.
fn plug(
    bridge_ns: &NetnsFd,
    port: &str,
    bridge: &str,
    node_ns: &NetnsFd,
    ifname: &str,
    address: (&str, u8),
) -> Result<()> {
    let mut bridge_end = EndSettings::named(port);
    bridge_end.mtu = Some(UNDERLAY_MTU);
    let mut node_end = EndSettings::named(ifname);
    node_end.mtu = Some(UNDERLAY_MTU);
    node_end.address = Some((address.0.parse()?, address.1));
    create_veth(bridge_ns, &bridge_end, node_ns, &node_end)?;
    attach(bridge_ns, port, bridge)
}

/// The NAT router in front of pool `k`: its gateways' bridge, its WAN end, forwarding,
/// and nftables masquerading what leaves by the WAN end.
fn nat_router(paths: &LabPaths, lab_ns: &NetnsFd, k: usize, pool: &str) -> Result<()> {
    let nat_ns = namespaces::create(&paths.nat_netns(pool))?;
    make_bridge(&nat_ns, "br0", Some(UNDERLAY_MTU), None)?;
    super::netdev::add_addresses(
        &nat_ns,
        "br0",
        &[(format!("{}.1", nat_subnet(k)).parse()?, 24)],
    )?;
    plug(
        lab_ns,
        &format!("x{k}"),
        WAN_BRIDGE,
        &nat_ns,
        "out0",
        (&format!("172.30.1.{}", k + 1), WAN_PREFIX),
    )?;
    nat_ns.run("start the NAT router", || -> Result<()> {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").context("forwarding")?;
        for rule in [
            "add table ip xwire-nat",
            "add chain ip xwire-nat post { type nat hook postrouting priority 100 ; }",
            "add rule ip xwire-nat post oifname \"out0\" masquerade",
        ] {
            let out = Command::new("nft")
                .args(rule.split(' ').filter(|w| !w.is_empty()))
                .output()
                .context("run nft (apt-get install nftables)")?;
            if !out.status.success() {
                bail!(
                    "nft {rule}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
        }
        Ok(())
    })??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        let text = "name: p\nnodes: [a1, a2, b1, c1, c2]\npools:\n  east: {nodes: [a1, a2], gateways: [a1, a2]}\n  west: {nodes: [b1], gateways: [b1]}\n  edge: {nodes: [c1, c2], gateways: [c2], nat: true}\n";
        super::super::file::parse(text, None).unwrap()
    }

    #[test]
    fn each_pool_has_its_subnet_and_gateways_their_wan_ends() {
        let lab = lab();
        // Pools by name: east 0, edge 1, west 2.
        assert_eq!(node_address(&lab, "a2"), "172.31.1.2");
        assert_eq!(node_address(&lab, "c1"), "172.31.2.1");
        assert_eq!(node_address(&lab, "b1"), "172.31.3.1");
        assert_eq!(wan_end(&lab, "a2").unwrap().address, "172.30.0.2");
        assert_eq!(wan_end(&lab, "b1").unwrap().address, "172.30.0.3");
        let behind = wan_end(&lab, "c2").unwrap();
        assert_eq!(
            (behind.address.as_str(), behind.router.as_deref()),
            ("172.29.2.2", Some("172.29.2.1"))
        );
        assert!(wan_end(&lab, "c1").is_none(), "not a gateway");
    }

    #[test]
    fn the_pools_section_parses_as_the_daemon_reads_it() {
        let lab = lab();
        let toml = format!("node_name = \"c1\"\n{}", pools_toml(&lab, "c1"));
        let config: xwire_model::config::DaemonConfig = toml::from_str(&toml).unwrap();
        let pools = config.pools.unwrap();
        assert_eq!(pools.member_of, "edge");
        assert_eq!(pools.pools.len(), 3);
        assert!(pools
            .pools
            .iter()
            .any(|p| p.nat && p.gateways[0].node == "c2"));
    }
}
