//! Reads xwire's routes and rules in a namespace back, and writes the changes
//! `super::plan::changes` names: all of one pod's in one netlink session.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use futures::TryStreamExt;
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RouteProtocol, RouteScope,
};
use netlink_packet_route::rule::{RuleAction, RuleAttribute, RuleMessage};
use rtnetlink::{Handle, IpVersion, RouteMessageBuilder};

use super::plan::{self, AddressedEnd, PodRouting, Route, Rule, Selector, StaticRoute, PROTOCOL};
use crate::netns::{NetnsError, NetnsFd};
use crate::step_times;

/// What `sync` did in one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Synced {
    /// Each route or rule added or removed, described.
    pub changed: Vec<String>,
    /// Each one the kernel refused, with why (a static route whose gateway is not
    /// reachable yet, because the wire that reaches it is not up: the next pass tries
    /// again).
    pub refused: Vec<String>,
}

/// xwire's routes and rules in the namespace, as they are.
struct Found {
    rules: Vec<(Rule, RuleMessage)>,
    routes: Vec<(Route, RouteMessage)>,
}

/// Brings xwire's routes and rules in `ns` to what `spec` asks for, given the
/// interfaces that are there now; the others are never touched.
pub fn sync(ns: &NetnsFd, spec: &PodRoutingSpec) -> Result<Synced, NetnsError> {
    step_times::time(step_times::ROUTING, || {
        let spec = spec.clone();
        ns.netlink("set the pod's routes and rules", |h| async move {
            let indexes = link_indexes(&h).await?;
            let want = spec.want(|ifname| indexes.contains_key(ifname));
            let found = read(&h, &indexes).await?;
            Ok(converge(&h, &indexes, found, &want).await)
        })
    })
}

/// xwire's routes and rules in a pod's namespace as they are, and the names of the
/// interfaces there: what `PodRoutingSpec::changes` compares with what the pod's Topology
/// asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingSeen {
    pub interfaces: BTreeSet<String>,
    pub rules: Vec<Rule>,
    pub routes: Vec<Route>,
}

/// Reads xwire's routes and rules in `ns`, and its interfaces' names; changes nothing.
pub fn observe(ns: &NetnsFd) -> Result<RoutingSeen, NetnsError> {
    read_seen(ns, "read the pod's routes and rules")
}

/// xwire's routes and rules of routing table `table` in `ns` (the rules that look it up
/// and the routes in it), as they are; changes nothing.
pub(crate) fn observe_table(ns: &NetnsFd, table: u32) -> Result<RoutingSeen, NetnsError> {
    let mut seen = read_seen(ns, "read the node's routes and rules")?;
    seen.rules.retain(|r| r.table == table);
    seen.routes.retain(|r| r.table == table);
    Ok(seen)
}

fn read_seen(ns: &NetnsFd, op: &str) -> Result<RoutingSeen, NetnsError> {
    step_times::time(step_times::ROUTING, || {
        ns.netlink(op, |h| async move {
            let indexes = link_indexes(&h).await?;
            let found = read(&h, &indexes).await?;
            Ok(RoutingSeen {
                interfaces: indexes.into_keys().collect(),
                rules: found.rules.into_iter().map(|(rule, _)| rule).collect(),
                routes: found.routes.into_iter().map(|(route, _)| route).collect(),
            })
        })
    })
}

/// Brings xwire's routes and rules of routing table `table` in `ns` (the rules that look
/// it up and the routes in it) to `want`; everything else, xwire's own elsewhere
/// included, is left as it is.
pub(crate) fn sync_table(
    ns: &NetnsFd,
    table: u32,
    want: &PodRouting,
) -> Result<Synced, NetnsError> {
    step_times::time(step_times::ROUTING, || {
        let want = want.clone();
        ns.netlink("set the node's routes and rules", |h| async move {
            let indexes = link_indexes(&h).await?;
            let mut found = read(&h, &indexes).await?;
            found.rules.retain(|(r, _)| r.table == table);
            found.routes.retain(|(r, _)| r.table == table);
            Ok(converge(&h, &indexes, found, &want).await)
        })
    })
}

/// Removes what `found` has and `want` has not, then adds what `want` has and `found`
/// has not; each failure is noted, and the rest go on.
async fn converge(
    h: &Handle,
    indexes: &HashMap<String, u32>,
    found: Found,
    want: &PodRouting,
) -> Synced {
    let rules: Vec<Rule> = found.rules.iter().map(|(r, _)| r.clone()).collect();
    let routes: Vec<Route> = found.routes.iter().map(|(r, _)| r.clone()).collect();
    let changes = plan::changes(want, &rules, &routes);
    let mut synced = Synced::default();
    for i in changes.remove_rules {
        let (rule, message) = &found.rules[i];
        note(
            &mut synced,
            format!("removed rule {}", describe_rule(rule)),
            h.rule().del(message.clone()).execute().await,
        );
    }
    for i in changes.remove_routes {
        let (route, message) = &found.routes[i];
        note(
            &mut synced,
            format!("removed route {}", describe_route(route)),
            h.route().del(message.clone()).execute().await,
        );
    }
    for route in &changes.add_routes {
        let what = format!("added route {}", describe_route(route));
        match route_message(route, indexes) {
            Ok(message) => note(&mut synced, what, h.route().add(message).execute().await),
            Err(why) => synced.refused.push(format!("{what}: {why}")),
        }
    }
    for rule in &changes.add_rules {
        note(
            &mut synced,
            format!("added rule {}", describe_rule(rule)),
            add_rule(h, rule).await,
        );
    }
    synced
}

/// Removes every route and rule of xwire's in `ns` (a pod's DEL, where its namespace
/// stays for the runtime's other plugins).
pub fn remove_all(ns: &NetnsFd) -> Result<Synced, NetnsError> {
    step_times::time(step_times::ROUTING, || sync(ns, &PodRoutingSpec::default()))
}

/// What a pod's Topology asks for: its addressed ends (in uid order), its static routes
/// and whether router mode is on (with its settings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRoutingSpec {
    pub ends: Vec<AddressedEnd>,
    pub statics: Vec<StaticRoute>,
    pub policy: Option<plan::PolicySettings>,
}

impl PodRoutingSpec {
    /// Whether it asks for nothing at all.
    pub fn is_empty(&self) -> bool {
        self.statics.is_empty() && (self.policy.is_none() || self.ends.is_empty())
    }

    /// The routes and rules it asks for where the interfaces that `present` names are
    /// in the pod (an end's table is filled only once its interface is there).
    /// A static route whose gateway is in the subnet of an end that is not there yet
    /// waits for it, as the end waits for its wire: the kernel would refuse it, and a
    /// pod whose wire waits for its far end is as it should be for now.
    pub fn want(&self, present: impl Fn(&str) -> bool) -> PodRouting {
        let mut ends = self.ends.clone();
        for end in &mut ends {
            end.present = present(&end.ifname);
        }
        let statics: Vec<StaticRoute> = self
            .statics
            .iter()
            .filter(|route| {
                !ends
                    .iter()
                    .any(|end| !end.present && plan::within(route.via, end.address))
            })
            .cloned()
            .collect();
        plan::desired(&ends, &statics, self.policy)
    }

    /// What to change in a pod found as `seen` to give it what this asks for.
    pub fn changes(&self, seen: &RoutingSeen) -> plan::Changes {
        let want = self.want(|ifname| seen.interfaces.contains(ifname));
        plan::changes(&want, &seen.rules, &seen.routes)
    }
}

fn note(synced: &mut Synced, what: String, result: Result<(), rtnetlink::Error>) {
    match result {
        Ok(()) => synced.changed.push(what),
        Err(e) => synced.refused.push(format!("{what}: {e}")),
    }
}

async fn read(h: &Handle, indexes: &HashMap<String, u32>) -> Result<Found, rtnetlink::Error> {
    let names: HashMap<u32, String> = indexes
        .iter()
        .map(|(name, index)| (*index, name.clone()))
        .collect();
    let mut found = Found {
        rules: Vec::new(),
        routes: Vec::new(),
    };
    for version in [IpVersion::V4, IpVersion::V6] {
        let rules: Vec<RuleMessage> = h
            .rule()
            .get(version.clone())
            .execute()
            .try_collect()
            .await?;
        found
            .rules
            .extend(rules.into_iter().filter_map(|m| Some((rule_of(&m)?, m))));
        let dump = match version {
            IpVersion::V4 => RouteMessageBuilder::<std::net::Ipv4Addr>::new().build(),
            IpVersion::V6 => RouteMessageBuilder::<std::net::Ipv6Addr>::new().build(),
        };
        let routes: Vec<RouteMessage> = h.route().get(dump).execute().try_collect().await?;
        found.routes.extend(
            routes
                .into_iter()
                .filter_map(|m| Some((route_of(&m, &names)?, m))),
        );
    }
    Ok(found)
}

async fn link_indexes(h: &Handle) -> Result<HashMap<String, u32>, rtnetlink::Error> {
    use netlink_packet_route::link::LinkAttribute;
    let links: Vec<_> = h.link().get().execute().try_collect().await?;
    Ok(links
        .into_iter()
        .filter_map(|l| {
            l.attributes.iter().find_map(|a| match a {
                LinkAttribute::IfName(name) => Some((name.clone(), l.header.index)),
                _ => None,
            })
        })
        .collect())
}

/// One of xwire's rules, or `None` for anyone else's.
fn rule_of(m: &RuleMessage) -> Option<Rule> {
    let ours = m
        .attributes
        .iter()
        .any(|a| matches!(a, RuleAttribute::Protocol(p) if u8::from(*p) == PROTOCOL));
    if !ours {
        return None;
    }
    let (mut from, mut to) = (None, None);
    let mut table = u32::from(m.header.table);
    let mut priority = 0;
    for attribute in &m.attributes {
        match attribute {
            RuleAttribute::Source(ip) => from = Some(*ip),
            RuleAttribute::Destination(ip) => to = Some((*ip, m.header.dst_len)),
            RuleAttribute::Table(t) => table = *t,
            RuleAttribute::Priority(p) => priority = *p,
            _ => {}
        }
    }
    let selector = match (from, to) {
        (Some(from), None) => Selector::From(from),
        (None, Some(to)) => Selector::To(to),
        _ => return None,
    };
    Some(Rule {
        selector,
        table,
        priority,
    })
}

/// One of xwire's routes, or `None` for anyone else's.
fn route_of(m: &RouteMessage, names: &HashMap<u32, String>) -> Option<Route> {
    if u8::from(m.header.protocol) != PROTOCOL {
        return None;
    }
    let ip = |a: &RouteAddress| match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    };
    let unspecified = match m.header.address_family {
        netlink_packet_route::AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
    };
    let mut route = Route {
        table: u32::from(m.header.table),
        dst: (unspecified, m.header.destination_prefix_length),
        via: None,
        dev: None,
        src: None,
        mtu: None,
    };
    for attribute in &m.attributes {
        match attribute {
            RouteAttribute::Metrics(metrics) => {
                route.mtu = metrics.iter().find_map(|m| match m {
                    RouteMetric::Mtu(mtu) => Some(*mtu),
                    _ => None,
                })
            }
            RouteAttribute::Table(t) => route.table = *t,
            RouteAttribute::Destination(a) => route.dst.0 = ip(a)?,
            RouteAttribute::Gateway(a) => route.via = ip(a),
            RouteAttribute::PrefSource(a) => route.src = ip(a),
            RouteAttribute::Oif(index) => route.dev = names.get(index).cloned(),
            _ => {}
        }
    }
    Some(route)
}

fn route_message(route: &Route, indexes: &HashMap<String, u32>) -> Result<RouteMessage, String> {
    let (dst, prefix) = route.dst;
    let mut builder = RouteMessageBuilder::<IpAddr>::new()
        .destination_prefix(dst, prefix)
        .map_err(|e| e.to_string())?
        .table_id(route.table)
        .protocol(RouteProtocol::from(PROTOCOL));
    if let Some(dev) = &route.dev {
        let index = indexes
            .get(dev)
            .ok_or_else(|| format!("there is no interface {dev}"))?;
        builder = builder.output_interface(*index);
    }
    if let Some(src) = route.src {
        builder = builder.pref_source(src).map_err(|e| e.to_string())?;
    }
    match route.via {
        Some(via) => builder = builder.gateway(via).map_err(|e| e.to_string())?,
        None => builder = builder.scope(RouteScope::Link),
    }
    let mut message = builder.build();
    if let Some(mtu) = route.mtu {
        message
            .attributes
            .push(RouteAttribute::Metrics(vec![RouteMetric::Mtu(mtu)]));
    }
    Ok(message)
}

async fn add_rule(h: &Handle, rule: &Rule) -> Result<(), rtnetlink::Error> {
    let request = h
        .rule()
        .add()
        .table_id(rule.table)
        .priority(rule.priority)
        .action(RuleAction::ToTable);
    let protocol = RuleAttribute::Protocol(RouteProtocol::from(PROTOCOL));
    match rule.selector {
        Selector::From(IpAddr::V4(a)) => {
            let mut request = request.v4().source_prefix(a, 32);
            request.message_mut().attributes.push(protocol);
            request.execute().await
        }
        Selector::From(IpAddr::V6(a)) => {
            let mut request = request.v6().source_prefix(a, 128);
            request.message_mut().attributes.push(protocol);
            request.execute().await
        }
        Selector::To((IpAddr::V4(a), prefix)) => {
            let mut request = request.v4().destination_prefix(a, prefix);
            request.message_mut().attributes.push(protocol);
            request.execute().await
        }
        Selector::To((IpAddr::V6(a), prefix)) => {
            let mut request = request.v6().destination_prefix(a, prefix);
            request.message_mut().attributes.push(protocol);
            request.execute().await
        }
    }
}

pub(crate) fn describe_rule(rule: &Rule) -> String {
    let selector = match rule.selector {
        Selector::From(ip) => format!("from {ip}"),
        Selector::To((ip, prefix)) => format!("to {ip}/{prefix}"),
    };
    format!(
        "{selector} lookup {} priority {}",
        rule.table, rule.priority
    )
}

pub(crate) fn describe_route(route: &Route) -> String {
    let mut text = format!("{}/{}", route.dst.0, route.dst.1);
    if let Some(via) = route.via {
        text.push_str(&format!(" via {via}"));
    }
    if let Some(dev) = &route.dev {
        text.push_str(&format!(" dev {dev}"));
    }
    if let Some(src) = route.src {
        text.push_str(&format!(" src {src}"));
    }
    if let Some(mtu) = route.mtu {
        text.push_str(&format!(" mtu {mtu}"));
    }
    if route.table != plan::MAIN_TABLE {
        text.push_str(&format!(" table {}", route.table));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_static_route_through_an_end_not_there_yet_waits_for_it() {
        let end = |ifname: &str, address: &str| AddressedEnd {
            ifname: ifname.into(),
            address: (ip(address), 30),
            peer: None,
            present: false,
        };
        let via = |dst: &str, gateway: &str| StaticRoute {
            dst: (ip(dst), 24),
            via: ip(gateway),
        };
        let spec = PodRoutingSpec {
            ends: vec![end("eth1", "10.0.1.1"), end("eth2", "10.0.2.1")],
            statics: vec![
                via("192.0.2.0", "10.0.1.2"),
                via("198.51.100.0", "10.0.2.2"),
                // Through no end of xwire's (the pod's primary network, say): never waits.
                via("203.0.113.0", "172.16.0.1"),
            ],
            policy: None,
        };
        let gateways = |present: &[&str]| -> Vec<IpAddr> {
            let want = spec.want(|ifname| present.contains(&ifname));
            want.routes.iter().filter_map(|r| r.via).collect()
        };
        assert_eq!(gateways(&[]), vec![ip("172.16.0.1")]);
        assert_eq!(gateways(&["eth2"]), vec![ip("10.0.2.2"), ip("172.16.0.1")]);
        assert_eq!(gateways(&["eth1", "eth2"]).len(), 3);
    }
}
