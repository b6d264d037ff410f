//! Node pools from the cluster's Node objects (docs/routing.md): a node's pool is its
//! `xwire.dev/pool` label; a node labelled `xwire.dev/gateway` is a gateway of its pool,
//! in the order of the label's value (a number, lowest first); a pool with a node
//! labelled `xwire.dev/pool-nat: "true"` is behind NAT. A gateway's tunnel listens at
//! its `xwire.dev/gateway-address` annotation (`IP:PORT`), else at its ExternalIP (else
//! InternalIP) and port 7480. A pool's CIDRs are its nodes' addresses, one host route
//! each. Pure: the watcher feeds it the nodes it saw.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Node as KubeNode;
use xwire_model::pools::{GatewaySpec, PoolSpec};

use crate::membership::LabelledPools;

pub(crate) const POOL_LABEL: &str = "xwire.dev/pool";
pub(crate) const GATEWAY_LABEL: &str = "xwire.dev/gateway";
pub(crate) const NAT_LABEL: &str = "xwire.dev/pool-nat";
pub(crate) const GATEWAY_ADDRESS_ANNOTATION: &str = "xwire.dev/gateway-address";

/// What the pools need of one Node object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeSeat {
    pub internal: Option<IpAddr>,
    pub external: Option<IpAddr>,
    pub pool: Option<String>,
    /// The gateway label's rank, when it has one that reads as a number.
    pub gateway_rank: Option<u32>,
    pub nat: bool,
    pub gateway_address: Option<SocketAddr>,
}

impl NodeSeat {
    pub fn of(node: &KubeNode) -> NodeSeat {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let address = |kind: &str| {
            node.status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .filter(|a| a.type_ == kind)
                .find_map(|a| a.address.parse::<IpAddr>().ok())
        };
        NodeSeat {
            internal: address("InternalIP"),
            external: address("ExternalIP"),
            pool: labels.get(POOL_LABEL).filter(|p| !p.is_empty()).cloned(),
            gateway_rank: labels.get(GATEWAY_LABEL).and_then(|r| r.parse().ok()),
            nat: labels.get(NAT_LABEL).is_some_and(|v| v == "true"),
            gateway_address: annotations
                .get(GATEWAY_ADDRESS_ANNOTATION)
                .and_then(|a| a.parse().ok()),
        }
    }
}

/// One pool's nodes as they are gathered: their host routes, its gateways with their
/// rank, and whether any node says it is behind NAT.
#[derive(Default)]
struct Gathered {
    cidrs: Vec<String>,
    gateways: Vec<(u32, String, GatewaySpec)>,
    nat: bool,
}

/// The pools the nodes' labels make, and `me`'s; `None` when `me` is in no pool. Pools
/// without a gateway are left out (their nodes are reached by no one outside), and
/// said so in the log.
pub(crate) fn pools_from_nodes(
    me: &str,
    nodes: &BTreeMap<String, NodeSeat>,
    gateway_port: u16,
) -> Option<LabelledPools> {
    let member_of = nodes.get(me)?.pool.clone()?;
    let mut pools: BTreeMap<&str, Gathered> = BTreeMap::new();
    for (name, seat) in nodes {
        let (Some(pool), Some(internal)) = (&seat.pool, seat.internal) else {
            continue;
        };
        let entry = pools.entry(pool).or_default();
        let host = if internal.is_ipv4() { 32 } else { 128 };
        entry.cidrs.push(format!("{internal}/{host}"));
        entry.nat |= seat.nat;
        if let Some(rank) = seat.gateway_rank {
            let wan = seat.gateway_address.unwrap_or_else(|| {
                SocketAddr::new(seat.external.unwrap_or(internal), gateway_port)
            });
            let spec = GatewaySpec {
                node: name.clone(),
                address: internal,
                wan,
            };
            entry.gateways.push((rank, name.clone(), spec));
        }
    }
    let mut specs = Vec::new();
    for (
        pool,
        Gathered {
            cidrs,
            mut gateways,
            nat,
        },
    ) in pools
    {
        if gateways.is_empty() {
            tracing::warn!(%pool, "node pool without a node labelled {GATEWAY_LABEL}: left out");
            continue;
        }
        gateways.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        specs.push(PoolSpec {
            name: pool.to_owned(),
            cidrs,
            gateways: gateways.into_iter().map(|(_, _, g)| g).collect(),
            nat,
        });
    }
    Some(LabelledPools {
        member_of,
        pools: specs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(ip: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> KubeNode {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        let mut node = KubeNode {
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    address: ip.into(),
                    type_: "InternalIP".into(),
                }]),
                ..NodeStatus::default()
            }),
            ..KubeNode::default()
        };
        node.metadata.labels = map(labels);
        node.metadata.annotations = map(annotations);
        node
    }

    fn seats() -> BTreeMap<String, NodeSeat> {
        [
            (
                "a1",
                node(
                    "10.0.1.1",
                    &[(POOL_LABEL, "east"), (GATEWAY_LABEL, "1")],
                    &[],
                ),
            ),
            (
                "a0",
                node(
                    "10.0.1.9",
                    &[(POOL_LABEL, "east"), (GATEWAY_LABEL, "0")],
                    &[(GATEWAY_ADDRESS_ANNOTATION, "198.51.100.7:9000")],
                ),
            ),
            ("a2", node("10.0.1.2", &[(POOL_LABEL, "east")], &[])),
            (
                "e1",
                node(
                    "10.9.0.1",
                    &[
                        (POOL_LABEL, "edge"),
                        (GATEWAY_LABEL, "0"),
                        (NAT_LABEL, "true"),
                    ],
                    &[],
                ),
            ),
            ("x1", node("10.7.0.1", &[(POOL_LABEL, "lost")], &[])),
            ("n1", node("10.8.0.1", &[], &[])),
        ]
        .into_iter()
        .map(|(name, node)| (name.to_owned(), NodeSeat::of(&node)))
        .collect()
    }

    #[test]
    fn labels_make_pools_with_gateways_in_rank_order() {
        let found = pools_from_nodes("a2", &seats(), 7480).unwrap();
        assert_eq!(found.member_of, "east");
        let names: Vec<&str> = found.pools.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["east", "edge"],
            "a pool without a gateway is left out"
        );
        let east = &found.pools[0];
        assert_eq!(east.cidrs, ["10.0.1.9/32", "10.0.1.1/32", "10.0.1.2/32"]);
        assert_eq!(east.gateways[0].node, "a0");
        assert_eq!(east.gateways[0].wan, "198.51.100.7:9000".parse().unwrap());
        assert_eq!(east.gateways[1].wan, "10.0.1.1:7480".parse().unwrap());
        assert!(found.pools[1].nat);
        xwire_model::pools::Pools::new(&found.pools).unwrap();
    }

    #[test]
    fn a_node_without_a_pool_label_is_in_no_pool() {
        assert!(pools_from_nodes("n1", &seats(), 7480).is_none());
        assert!(pools_from_nodes("nobody", &seats(), 7480).is_none());
    }
}
