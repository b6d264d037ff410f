//! The node pools as configured and as the gateways see them, and the decisions that need
//! no socket: which pool an address is in, which of a pool's gateways to send to, and
//! which of two gateways dials the other.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Where a gateway's tunnel listens unless its configuration says otherwise.
pub const DEFAULT_GATEWAY_PORT: u16 = 7480;

/// The overhead of the tunnel on the WAN, a DATAGRAM frame in a QUIC short-header packet
/// in UDP over IPv6 (the larger of the two IP headers), with room to spare: the tunnel's
/// MTU is the WAN's less this.
pub const TUNNEL_OVERHEAD: u16 = 100;

/// One pool, as configured (`[[pools.pool]]` in xwired.toml).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub name: String,
    /// The pool's nodes' addresses: what the other pools route through its gateways.
    pub cidrs: Vec<String>,
    /// In order of preference: the first one that is up carries the pool's traffic.
    pub gateways: Vec<GatewaySpec>,
    /// The pool is behind NAT: its gateways dial out and are never dialed.
    #[serde(default)]
    pub nat: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    /// The gateway's node name (its certificate's).
    pub node: String,
    /// Its address on the pool's own network: the pool's other nodes route through it.
    pub address: IpAddr,
    /// Where its tunnel listens (behind NAT: its own, private, address).
    pub wan: SocketAddr,
}

/// The pools, checked, with their CIDRs parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pools {
    pools: Vec<Pool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub cidrs: Vec<IpNet>,
    pub gateways: Vec<GatewaySpec>,
    pub nat: bool,
}

impl Pools {
    /// Checks the specs: names and gateways unique, CIDRs valid and not shared, every
    /// pool with a gateway, and at most one pool behind NAT (two pools behind NAT could
    /// not reach each other: neither can be dialed).
    pub fn new(specs: &[PoolSpec]) -> Result<Pools, String> {
        let mut pools: Vec<Pool> = Vec::new();
        let mut gateway_names = std::collections::HashSet::new();
        for spec in specs {
            if pools.iter().any(|p| p.name == spec.name) {
                return Err(format!("pool {} is listed twice", spec.name));
            }
            if spec.gateways.is_empty() {
                return Err(format!("pool {} has no gateway", spec.name));
            }
            let mut cidrs = Vec::new();
            for text in &spec.cidrs {
                let cidr: IpNet = text
                    .parse()
                    .map_err(|_| format!("pool {}: {text:?} is not a CIDR", spec.name))?;
                if let Some(other) = pools
                    .iter()
                    .find(|p| p.cidrs.iter().any(|c| overlaps(c, &cidr)))
                {
                    return Err(format!(
                        "pool {}: {text} overlaps pool {}'s",
                        spec.name, other.name
                    ));
                }
                cidrs.push(cidr);
            }
            for gateway in &spec.gateways {
                if !gateway_names.insert(gateway.node.clone()) {
                    return Err(format!("gateway {} is listed twice", gateway.node));
                }
            }
            pools.push(Pool {
                name: spec.name.clone(),
                cidrs,
                gateways: spec.gateways.clone(),
                nat: spec.nat,
            });
        }
        if pools.iter().filter(|p| p.nat).count() > 1 {
            return Err(
                "more than one pool is behind NAT: their gateways could not reach each other"
                    .into(),
            );
        }
        Ok(Pools { pools })
    }

    pub fn all(&self) -> &[Pool] {
        &self.pools
    }

    pub fn named(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|p| p.name == name)
    }

    /// The pool `node` is a gateway of.
    pub fn gateway_pool(&self, node: &str) -> Option<&Pool> {
        self.pools
            .iter()
            .find(|p| p.gateways.iter().any(|g| g.node == node))
    }

    /// The pool whose CIDRs hold `ip` (the longest match).
    pub fn pool_of(&self, ip: IpAddr) -> Option<usize> {
        self.pools
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.cidrs.iter().map(move |c| (i, *c)))
            .filter(|(_, c)| c.contains(&ip))
            .max_by_key(|(_, c)| c.prefix_len())
            .map(|(i, _)| i)
    }

    /// Whether gateway `me` (of pool `mine`) dials gateway `them` (of pool `theirs`):
    /// a gateway behind NAT dials (and is never dialed); between two that can both be
    /// dialed, the one whose name sorts first dials.
    pub fn dials(&self, mine: &Pool, me: &str, theirs: &Pool, them: &str) -> bool {
        match (mine.nat, theirs.nat) {
            (true, _) => true,
            (false, true) => false,
            (false, false) => me < them,
        }
    }
}

impl Pool {
    /// The first of the pool's gateways, in order of preference, that `up` says is up;
    /// `None` when none is.
    pub fn active_gateway(&self, up: impl Fn(&str) -> bool) -> Option<&GatewaySpec> {
        self.gateways.iter().find(|g| up(&g.node))
    }
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, cidr: &str, gateways: &[&str], nat: bool) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            cidrs: vec![cidr.into()],
            gateways: gateways
                .iter()
                .enumerate()
                .map(|(i, g)| GatewaySpec {
                    node: (*g).into(),
                    address: format!("10.0.0.{}", i + 1).parse().unwrap(),
                    wan: format!("192.0.2.{}:7480", i + 1).parse().unwrap(),
                })
                .collect(),
            nat,
        }
    }

    fn three() -> Pools {
        Pools::new(&[
            spec("east", "172.31.1.0/24", &["a1", "a2"], false),
            spec("west", "172.31.2.0/24", &["b1"], false),
            spec("edge", "172.31.3.0/24", &["c1"], true),
        ])
        .unwrap()
    }

    #[test]
    fn an_address_belongs_to_the_pool_whose_cidr_holds_it() {
        let pools = three();
        assert_eq!(pools.pool_of("172.31.2.9".parse().unwrap()), Some(1));
        assert_eq!(pools.pool_of("172.31.4.9".parse().unwrap()), None);
        assert_eq!(pools.pool_of("fd00::1".parse().unwrap()), None);
    }

    #[test]
    fn the_first_gateway_that_is_up_is_the_active_one() {
        let pools = three();
        let east = pools.named("east").unwrap();
        assert_eq!(east.active_gateway(|_| true).unwrap().node, "a1");
        assert_eq!(east.active_gateway(|n| n != "a1").unwrap().node, "a2");
        assert!(east.active_gateway(|_| false).is_none());
    }

    #[test]
    fn a_gateway_behind_nat_dials_and_is_never_dialed() {
        let pools = three();
        let (east, west, edge) = (&pools.all()[0], &pools.all()[1], &pools.all()[2]);
        assert!(pools.dials(edge, "c1", east, "a1"));
        assert!(!pools.dials(east, "a1", edge, "c1"));
        // Between two that can be dialed, exactly one dials.
        assert!(pools.dials(east, "a1", west, "b1"));
        assert!(!pools.dials(west, "b1", east, "a1"));
    }

    #[test]
    fn mistakes_are_refused() {
        for (specs, expected) in [
            (
                vec![
                    spec("a", "10.1.0.0/16", &["x"], false),
                    spec("a", "10.2.0.0/16", &["y"], false),
                ],
                "twice",
            ),
            (vec![spec("a", "10.1.0.0/16", &[], false)], "no gateway"),
            (
                vec![
                    spec("a", "10.1.0.0/16", &["x"], false),
                    spec("b", "10.1.2.0/24", &["y"], false),
                ],
                "overlaps",
            ),
            (
                vec![
                    spec("a", "10.1.0.0/16", &["x"], true),
                    spec("b", "10.2.0.0/16", &["y"], true),
                ],
                "NAT",
            ),
            (
                vec![spec("a", "10.1.0.0/16", &["x", "x"], false)],
                "gateway x is listed twice",
            ),
            (vec![spec("a", "10.1.0.0", &["x"], false)], "not a CIDR"),
        ] {
            let e = Pools::new(&specs).unwrap_err();
            assert!(e.contains(expected), "{e}");
        }
    }
}
