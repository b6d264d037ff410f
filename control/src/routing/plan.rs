//! What routes and rules a pod should have, and what to add and remove to get there:
//! plain data, no sockets (`super::netlink` reads and writes them).
//!
//! Every route and rule xwire makes carries `PROTOCOL` as its routing protocol, so that
//! xwire reads back and removes only its own and never a route or rule that the pod, the
//! runtime or another plugin made.

use std::collections::BTreeSet;
use std::net::IpAddr;

pub use xwire_model::route::{network, PolicySettings, StaticRoute};

/// The routing protocol number on xwire's routes and rules (`ip route` shows it as
/// `proto 120`). Not one of the numbers iproute2's rt_protos names.
pub const PROTOCOL: u8 = 120;

/// The kernel's main routing table.
pub(crate) const MAIN_TABLE: u32 = 254;

/// A pod interface of xwire's that has an address, in uid order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressedEnd {
    pub ifname: String,
    pub address: (IpAddr, u8),
    /// The far end's address, where the link gives one: the table's default route goes
    /// through it.
    pub peer: Option<IpAddr>,
    /// Whether the interface is in the pod now (a pending end has none yet).
    pub present: bool,
}

/// A rule as xwire makes it: `from ADDRESS lookup TABLE priority N` (router mode) or
/// `to NETWORK lookup TABLE priority N` (a node's routes to the other pools).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    pub selector: Selector,
    pub table: u32,
    pub priority: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Selector {
    /// Packets from this address (a whole address: /32 or /128).
    From(IpAddr),
    /// Packets to this network.
    To((IpAddr, u8)),
}

/// A route as xwire makes it. `dev` and `src` of `None` are the kernel's choice.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Route {
    pub table: u32,
    pub dst: (IpAddr, u8),
    pub via: Option<IpAddr>,
    pub dev: Option<String>,
    pub src: Option<IpAddr>,
    /// The route's MTU (a tunnel's, lower than the interface's); `None`: the interface's.
    pub mtu: Option<u32>,
}

impl Route {
    /// Whether `found` (read back, where the kernel has filled in every field) is this
    /// route.
    pub fn is(&self, found: &Route) -> bool {
        self.table == found.table
            && self.dst == found.dst
            && self.via == found.via
            && (self.dev.is_none() || self.dev == found.dev)
            && (self.src.is_none() || self.src == found.src)
            && self.mtu == found.mtu
    }
}

/// The routes and rules a pod should have.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRouting {
    pub rules: BTreeSet<Rule>,
    pub routes: BTreeSet<Route>,
}

impl PodRouting {
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.routes.is_empty()
    }
}

/// What a pod should have: with `policy`, for each end with an address, a table with the
/// end's subnet and a default route through its far end, and a rule that sends what
/// leaves from the end's address to that table; and the static routes in the main table.
/// Only ends whose interface is present get theirs (the kernel refuses a route through an
/// interface that is not there), but every addressed end keeps its table number, so one
/// end coming or going never renumbers another's.
pub(crate) fn desired(
    ends: &[AddressedEnd],
    statics: &[StaticRoute],
    policy: Option<PolicySettings>,
) -> PodRouting {
    let mut routing = PodRouting::default();
    if let Some(policy) = policy {
        let mut table = usable_table(policy.first_table);
        for end in ends {
            let this_table = table;
            table = usable_table(table.saturating_add(1));
            if !end.present {
                continue;
            }
            let table = this_table;
            let (address, prefix) = end.address;
            routing.rules.insert(Rule {
                selector: Selector::From(address),
                table,
                priority: policy.rule_priority,
            });
            routing.routes.insert(Route {
                table,
                dst: network(address, prefix),
                via: None,
                dev: Some(end.ifname.clone()),
                // An IPv6 address is refused as a source while duplicate address
                // detection runs; the rule already picks the table by source.
                src: address.is_ipv4().then_some(address),
                mtu: None,
            });
            if let Some(peer) = end.peer.filter(|p| p.is_ipv4() == address.is_ipv4()) {
                routing.routes.insert(Route {
                    table,
                    dst: (unspecified(address), 0),
                    via: Some(peer),
                    dev: Some(end.ifname.clone()),
                    src: None,
                    mtu: None,
                });
            }
        }
    }
    for route in statics {
        routing.routes.insert(Route {
            table: MAIN_TABLE,
            dst: route.dst,
            via: Some(route.via),
            dev: None,
            src: None,
            mtu: None,
        });
    }
    routing
}

/// What to change so that a pod with `found` (xwire's own, as read back) has `want`:
/// indexes into `found` to remove, and what to add.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub remove_rules: Vec<usize>,
    pub remove_routes: Vec<usize>,
    pub add_rules: Vec<Rule>,
    pub add_routes: Vec<Route>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.remove_rules.is_empty()
            && self.remove_routes.is_empty()
            && self.add_rules.is_empty()
            && self.add_routes.is_empty()
    }
}

pub fn changes(want: &PodRouting, found_rules: &[Rule], found_routes: &[Route]) -> Changes {
    Changes {
        remove_rules: (0..found_rules.len())
            .filter(|&i| !want.rules.contains(&found_rules[i]))
            .collect(),
        remove_routes: (0..found_routes.len())
            .filter(|&i| !want.routes.iter().any(|r| r.is(&found_routes[i])))
            .collect(),
        add_rules: want
            .rules
            .iter()
            .filter(|r| !found_rules.contains(r))
            .cloned()
            .collect(),
        // Routes through an interface first: a table's default route needs its subnet's.
        add_routes: {
            let mut add: Vec<Route> = want
                .routes
                .iter()
                .filter(|r| !found_routes.iter().any(|f| r.is(f)))
                .cloned()
                .collect();
            add.sort_by_key(|r| r.via.is_some());
            add
        },
    }
}

/// `table`, or the next number after it that is not one of the kernel's own tables (0,
/// and 253 to 255: default, main and local).
fn usable_table(table: u32) -> u32 {
    match table {
        0 => 1,
        253..=255 => 256,
        other => other,
    }
}

/// Whether `address` is in the subnet of `(interface_address, prefix)`.
pub fn within(address: IpAddr, (interface_address, prefix): (IpAddr, u8)) -> bool {
    address.is_ipv4() == interface_address.is_ipv4()
        && network(address, prefix) == network(interface_address, prefix)
}

fn unspecified(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn end(
        ifname: &str,
        address: &str,
        prefix: u8,
        peer: Option<&str>,
        present: bool,
    ) -> AddressedEnd {
        AddressedEnd {
            ifname: ifname.into(),
            address: (ip(address), prefix),
            peer: peer.map(ip),
            present,
        }
    }

    #[test]
    fn each_addressed_end_gets_its_own_table_and_rule() {
        let ends = [
            end("eth1", "10.0.0.1", 30, Some("10.0.0.2"), true),
            end("eth2", "2001:db8::1", 64, None, true),
        ];
        let want = desired(&ends, &[], Some(PolicySettings::default()));
        let rules: Vec<Rule> = want.rules.iter().cloned().collect();
        assert_eq!(
            rules,
            vec![
                Rule {
                    selector: Selector::From(ip("10.0.0.1")),
                    table: 1000,
                    priority: 1000
                },
                Rule {
                    selector: Selector::From(ip("2001:db8::1")),
                    table: 1001,
                    priority: 1000
                },
            ]
        );
        assert!(want.routes.contains(&Route {
            table: 1000,
            dst: (ip("10.0.0.0"), 30),
            via: None,
            dev: Some("eth1".into()),
            src: Some(ip("10.0.0.1")),
            mtu: None,
        }));
        assert!(want.routes.contains(&Route {
            table: 1000,
            dst: (ip("0.0.0.0"), 0),
            via: Some(ip("10.0.0.2")),
            dev: Some("eth1".into()),
            src: None,
            mtu: None,
        }));
        // No far-end address: no default route in eth2's table.
        assert_eq!(want.routes.iter().filter(|r| r.table == 1001).count(), 1);
    }

    #[test]
    fn an_absent_end_keeps_its_number_but_gets_nothing() {
        let ends = [
            end("eth1", "10.0.0.1", 30, None, false),
            end("eth2", "10.0.1.1", 30, None, true),
        ];
        let want = desired(
            &ends,
            &[],
            Some(PolicySettings {
                first_table: 50,
                rule_priority: 7,
            }),
        );
        assert_eq!(want.rules.len(), 1);
        assert_eq!(want.rules.first().unwrap().table, 51);
    }

    #[test]
    fn the_kernels_own_tables_are_never_used() {
        let ends: Vec<AddressedEnd> = (0..4)
            .map(|i| end(&format!("eth{i}"), &format!("10.0.{i}.1"), 30, None, true))
            .collect();
        let want = desired(
            &ends,
            &[],
            Some(PolicySettings {
                first_table: 251,
                rule_priority: 7,
            }),
        );
        let tables: Vec<u32> = want.rules.iter().map(|r| r.table).collect();
        assert_eq!(tables, vec![251, 252, 256, 257]);
    }

    #[test]
    fn without_router_mode_only_static_routes() {
        let ends = [end("eth1", "10.0.0.1", 30, Some("10.0.0.2"), true)];
        let statics = [StaticRoute {
            dst: (ip("192.0.2.0"), 24),
            via: ip("10.0.0.2"),
        }];
        let want = desired(&ends, &statics, None);
        assert!(want.rules.is_empty());
        assert_eq!(want.routes.len(), 1);
        assert_eq!(want.routes.first().unwrap().table, MAIN_TABLE);
    }

    #[test]
    fn changes_remove_what_is_not_wanted_and_add_what_is_missing() {
        let statics = [StaticRoute {
            dst: (ip("192.0.2.0"), 24),
            via: ip("10.0.0.2"),
        }];
        let want = desired(&[], &statics, None);
        // Read back, the kernel names the device: still the same route.
        let kept = Route {
            table: MAIN_TABLE,
            dst: (ip("192.0.2.0"), 24),
            via: Some(ip("10.0.0.2")),
            dev: Some("eth1".into()),
            src: None,
            mtu: None,
        };
        let stale = Route {
            dst: (ip("198.51.100.0"), 24),
            ..kept.clone()
        };
        let stale_rule = Rule {
            selector: Selector::From(ip("10.0.0.1")),
            table: 1000,
            priority: 1000,
        };
        let c = changes(&want, &[stale_rule], &[stale, kept.clone()]);
        assert_eq!(c.remove_routes, vec![0]);
        assert_eq!(c.remove_rules, vec![0]);
        assert!(c.add_routes.is_empty() && c.add_rules.is_empty());
        let c = changes(&want, &[], &[kept]);
        assert!(c.is_empty());
    }

    #[test]
    fn a_tables_subnet_route_is_added_before_its_default_route() {
        let ends = [end("eth1", "10.0.0.1", 30, Some("10.0.0.2"), true)];
        let want = desired(&ends, &[], Some(PolicySettings::default()));
        let c = changes(&want, &[], &[]);
        assert_eq!(c.add_routes.len(), 2);
        assert!(c.add_routes[0].via.is_none() && c.add_routes[1].via.is_some());
    }
}
