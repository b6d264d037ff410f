//! Veth mode's configuration and what it makes, as plain data (`super::netlink` makes
//! it, reads it back and takes it away).
//!
//! A pod whose primary interface cannot reach its own node (a macvlan or ipvlan child
//! never talks to its parent's host) gets a second interface, a veth to the node, with
//! routes through it to the node and to the configured service, cluster and additional
//! CIDRs; the node gets a route back to each of the pod's addresses. Permanent neighbour
//! entries on both sides mean no first packet waits for (or is lost to) address
//! resolution.

use std::net::IpAddr;

use serde_json::Value;
use xwire_proto::local::{codes, CniError};

/// The routing protocol number on xwire's routes (as the daemon's own: `proto 120`).
pub const PROTOCOL: u8 = 120;
/// Marks the node end of a pod's veth: `xwire-veth:CONTAINER/IFNAME`.
pub const ALIAS_PREFIX: &str = "xwire-veth:";

/// The `vethMode` object of the plugin's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethMode {
    /// The pod's end of the veth.
    pub pod_interface: String,
    /// The service, cluster and additional CIDRs, in that order.
    pub cidrs: Vec<(IpAddr, u8)>,
    /// The node's addresses the pod reaches it by; empty: those of the interface of the
    /// node's default route, found at ADD.
    pub node_addresses: Vec<IpAddr>,
    /// `rp_filter` for the pod's interfaces (primary and veth) and the node's end.
    pub rp_filter: u8,
    pub mtu: Option<u32>,
}

fn invalid(msg: String) -> CniError {
    CniError {
        code: codes::INVALID_CONFIG,
        msg,
        details: String::new(),
    }
}

/// Reads `vethMode` from a network configuration; `None` when it is absent.
pub fn parse(config: &Value) -> Result<Option<VethMode>, CniError> {
    let Some(section) = config.get("vethMode") else {
        return Ok(None);
    };
    let Value::Object(section) = section else {
        return Err(invalid("\"vethMode\" must be an object".into()));
    };
    for key in section.keys() {
        if !KEYS.contains(&key.as_str()) {
            return Err(invalid(format!(
                "vethMode: unknown key {key:?} (known: {})",
                KEYS.join(", ")
            )));
        }
    }
    let strings = |key: &str| -> Result<Vec<String>, CniError> {
        match section.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| invalid(format!("vethMode.{key}: a list of strings")))
                })
                .collect(),
            Some(_) => Err(invalid(format!("vethMode.{key}: a list of strings"))),
        }
    };
    let mut cidrs = Vec::new();
    for key in ["serviceCIDRs", "clusterCIDRs", "additionalCIDRs"] {
        for text in strings(key)? {
            let cidr = parse_cidr(&text)
                .ok_or_else(|| invalid(format!("vethMode.{key}: {text:?} is not a CIDR")))?;
            cidrs.push(cidr);
        }
    }
    let node_addresses = strings("nodeAddresses")?
        .iter()
        .map(|text| {
            text.parse::<IpAddr>().map_err(|_| {
                invalid(format!(
                    "vethMode.nodeAddresses: {text:?} is not an address"
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    let pod_interface = match section.get("podInterface") {
        None => DEFAULT_POD_INTERFACE.to_owned(),
        Some(Value::String(name)) if valid_ifname(name) => name.clone(),
        Some(other) => {
            return Err(invalid(format!(
                "vethMode.podInterface: {other} is not an interface name"
            )))
        }
    };
    let rp_filter = match section.get("rpFilter") {
        None => DEFAULT_RP_FILTER,
        Some(v) => match v.as_u64() {
            Some(n @ 0..=2) => n as u8,
            _ => return Err(invalid("vethMode.rpFilter: 0, 1 or 2".into())),
        },
    };
    let mtu = match section.get("mtu") {
        None => None,
        Some(v) => match v.as_u64() {
            Some(n @ 68..=65535) => Some(n as u32),
            _ => return Err(invalid("vethMode.mtu: 68 to 65535".into())),
        },
    };
    Ok(Some(VethMode {
        pod_interface,
        cidrs,
        node_addresses,
        rp_filter,
        mtu,
    }))
}

const KEYS: &[&str] = &[
    "serviceCIDRs",
    "clusterCIDRs",
    "additionalCIDRs",
    "nodeAddresses",
    "podInterface",
    "rpFilter",
    "mtu",
];
pub(crate) const DEFAULT_POD_INTERFACE: &str = "veth0";
/// Loose: a packet passes if its source is reachable by any interface, which the routes
/// through the veth make true for what comes in on the primary.
pub(crate) const DEFAULT_RP_FILTER: u8 = 2;

fn valid_ifname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && !name.contains(['/', ':'])
        && !name.chars().any(char::is_whitespace)
        && name != "."
        && name != ".."
}

fn parse_cidr(text: &str) -> Option<(IpAddr, u8)> {
    let net: ipnet::IpNet = text.parse().ok()?;
    Some((net.addr(), net.prefix_len()))
}

/// The pod's addresses from the primary plugin's result.
pub fn pod_addresses(prev_result: Option<&Value>) -> Vec<IpAddr> {
    prev_result
        .and_then(|r| r.get("ips"))
        .and_then(Value::as_array)
        .map(|ips| {
            ips.iter()
                .filter_map(|ip| ip.get("address")?.as_str())
                .filter_map(|a| parse_cidr(a).map(|(ip, _)| ip))
                .collect()
        })
        .unwrap_or_default()
}

/// A route veth mode makes: through the veth (in the pod, or on the node to the pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub dst: (IpAddr, u8),
    pub via: Option<IpAddr>,
    pub src: Option<IpAddr>,
}

/// Everything veth mode makes for one pod, but the veth itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// In the pod, through its end of the veth.
    pub pod_routes: Vec<Route>,
    /// In the pod: the node's addresses, at the node end's MAC.
    pub pod_neighbours: Vec<IpAddr>,
    /// On the node, through its end: one per pod address.
    pub node_routes: Vec<Route>,
    /// On the node: the pod's addresses, at the pod end's MAC.
    pub node_neighbours: Vec<IpAddr>,
}

/// What the pod with `pod_ips` gets, reaching the node at `node_addresses`: for each
/// address family the pod has, a host route to the node's first address of that family
/// and the CIDRs of that family through it; the node gets a host route to each pod
/// address. Families the pod lacks, or the node lacks, get nothing.
pub fn plan(mode: &VethMode, pod_ips: &[IpAddr], node_addresses: &[IpAddr]) -> Plan {
    let mut plan = Plan {
        pod_routes: Vec::new(),
        pod_neighbours: Vec::new(),
        node_routes: Vec::new(),
        node_neighbours: Vec::new(),
    };
    for v4 in [true, false] {
        let Some(&pod_ip) = pod_ips.iter().find(|ip| ip.is_ipv4() == v4) else {
            continue;
        };
        let Some(&node) = node_addresses.iter().find(|ip| ip.is_ipv4() == v4) else {
            continue;
        };
        let host = if v4 { 32 } else { 128 };
        plan.pod_routes.push(Route {
            dst: (node, host),
            via: None,
            src: Some(pod_ip),
        });
        plan.pod_neighbours.push(node);
        for &cidr in mode.cidrs.iter().filter(|c| c.0.is_ipv4() == v4) {
            plan.pod_routes.push(Route {
                dst: cidr,
                via: Some(node),
                src: Some(pod_ip),
            });
        }
        for &ip in pod_ips.iter().filter(|ip| ip.is_ipv4() == v4) {
            plan.node_routes.push(Route {
                dst: (ip, host),
                via: None,
                src: None,
            });
            plan.node_neighbours.push(ip);
        }
    }
    plan
}

/// The node end's name: `xv` and a hash of the attachment (Linux allows 15 characters).
pub(crate) fn node_interface(container_id: &str, ifname: &str) -> String {
    let hash = xwire_proto::fnv1a64(format!("{container_id}/{ifname}").as_bytes());
    format!("xv{:012x}", hash & 0xffff_ffff_ffff)
}

pub fn node_alias(container_id: &str, ifname: &str) -> String {
    format!("{ALIAS_PREFIX}{container_id}/{ifname}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn keys_and_defaults() {
        let mode = parse(&json!({"vethMode": {
            "serviceCIDRs": ["10.96.0.0/12"], "clusterCIDRs": ["10.244.0.0/16", "fd00:244::/56"],
            "nodeAddresses": ["192.168.1.10"]}}))
        .unwrap()
        .unwrap();
        assert_eq!(mode.pod_interface, "veth0");
        assert_eq!(mode.rp_filter, 2);
        assert_eq!(mode.cidrs.len(), 3);
        assert_eq!(parse(&json!({})).unwrap(), None);
    }

    #[test]
    fn mistakes_are_invalid_config() {
        for bad in [
            json!({"vethMode": []}),
            json!({"vethMode": {"serviceCIDR": ["10.96.0.0/12"]}}),
            json!({"vethMode": {"serviceCIDRs": ["10.96.0.0"]}}),
            json!({"vethMode": {"serviceCIDRs": "10.96.0.0/12"}}),
            json!({"vethMode": {"nodeAddresses": ["node"]}}),
            json!({"vethMode": {"podInterface": "a/b"}}),
            json!({"vethMode": {"rpFilter": 3}}),
            json!({"vethMode": {"mtu": 20}}),
        ] {
            let e = parse(&bad).unwrap_err();
            assert_eq!(e.code, codes::INVALID_CONFIG, "{bad}");
        }
    }

    #[test]
    fn routes_per_family_through_the_nodes_address() {
        let mode = parse(&json!({"vethMode": {
            "serviceCIDRs": ["10.96.0.0/12", "fd00:96::/108"], "clusterCIDRs": ["10.244.0.0/16"]}}))
        .unwrap()
        .unwrap();
        let plan = plan(
            &mode,
            &[ip("192.168.1.50")],
            &[ip("192.168.1.10"), ip("fd00::10")],
        );
        assert_eq!(
            plan.pod_routes,
            vec![
                Route {
                    dst: (ip("192.168.1.10"), 32),
                    via: None,
                    src: Some(ip("192.168.1.50"))
                },
                Route {
                    dst: (ip("10.96.0.0"), 12),
                    via: Some(ip("192.168.1.10")),
                    src: Some(ip("192.168.1.50"))
                },
                Route {
                    dst: (ip("10.244.0.0"), 16),
                    via: Some(ip("192.168.1.10")),
                    src: Some(ip("192.168.1.50"))
                },
            ],
            "the pod has no IPv6 address: no IPv6 routes"
        );
        assert_eq!(
            plan.node_routes,
            vec![Route {
                dst: (ip("192.168.1.50"), 32),
                via: None,
                src: None
            }]
        );
        assert_eq!(plan.pod_neighbours, vec![ip("192.168.1.10")]);
        assert_eq!(plan.node_neighbours, vec![ip("192.168.1.50")]);
    }

    #[test]
    fn pod_addresses_come_from_the_previous_result() {
        let prev = json!({"ips": [{"address": "10.1.0.5/24"}, {"address": "fd00::5/64"}, {"address": "bad"}]});
        assert_eq!(
            pod_addresses(Some(&prev)),
            vec![ip("10.1.0.5"), ip("fd00::5")]
        );
        assert!(pod_addresses(None).is_empty());
    }

    #[test]
    fn node_interface_names_fit_and_differ() {
        // The name of an interface that exists on a node must not change with a build.
        assert_eq!(node_interface("abc123", "eth1"), "xv17d26ad50f3c");
        let a = node_interface("abc", "eth0");
        assert_eq!(a.len(), 14);
        assert_ne!(a, node_interface("abd", "eth0"));
        assert_ne!(a, node_interface("abc", "eth1"));
    }
}
