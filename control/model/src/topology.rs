//! meshnet's Topology resource (`networkop.co.uk/v1beta1`, kind `Topology`): one object
//! per pod, named after the pod, in the lab's namespace, listing the pod's links. xwire
//! reads exactly meshnet's fields and adds optional ones of its own to a link (mtu,
//! local_mac, peer_mac, carrier, impairment) and to the spec (routes, policy_routing).
//! Parsing and checking are pure; storing is elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use xwire_proto::control::{Carrier, WireKey};
use xwire_proto::data::MAX_LINK_MTU;

use crate::impairment::{Impairment, ImpairmentSpec};
use crate::route::{network, StaticRoute};

pub const API_VERSION: &str = "networkop.co.uk/v1beta1";
pub const KIND: &str = "Topology";
/// Linux's limit on an interface name, less the terminating NUL.
pub const MAX_IFNAME: usize = 15;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: TopologySpec,
    /// meshnet's status (skipped, src_ip, net_ns, container_id), kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// labels, annotations and the rest, kept as given.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

fn default_namespace() -> String {
    "default".into()
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TopologySpec {
    #[serde(default)]
    pub links: Vec<Link>,
    /// Static routes in the pod (xwire's field), set in its main table once their gateway
    /// is reachable, that is once the wire that reaches it is up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteEntry>,
    /// Router mode (xwire's field): each of the pod's xwire interfaces with an address
    /// gets a routing table of its own and a rule from its address, so that a reply
    /// leaves by the interface its request came in on. `None`: the node's default
    /// (`[routing] policy_routing` in xwired.toml).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_routing: Option<bool>,
}

/// One static route: `dst` (an address with a prefix length) through `via`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteEntry {
    pub dst: String,
    pub via: String,
}

impl RouteEntry {
    /// The route parsed, or why it does not parse.
    pub fn parse(&self) -> Result<StaticRoute, String> {
        let dst = parse_cidr(&self.dst).map_err(|e| format!("dst: {e}"))?;
        if network(dst.0, dst.1) != dst {
            return Err(format!(
                "dst: {:?} has host bits set (the network is {}/{})",
                self.dst,
                network(dst.0, dst.1).0,
                dst.1
            ));
        }
        let via: IpAddr = self
            .via
            .parse()
            .map_err(|_| format!("via: {:?} is not an address", self.via))?;
        if via.is_ipv4() != dst.0.is_ipv4() {
            return Err(format!(
                "via {} and dst {} are not of one address family",
                self.via, self.dst
            ));
        }
        Ok(StaticRoute { dst, via })
    }
}

/// One link of a pod: its own end (`local_*`) and the end on `peer_pod` (`peer_*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub uid: u64,
    pub peer_pod: String,
    pub local_intf: String,
    pub peer_intf: String,
    /// CIDR, e.g. `10.0.0.1/30`.
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_ip: Option<String>,
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub peer_ip: Option<String>,
    /// xwire's own: the MTU of both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub local_mac: Option<String>,
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub peer_mac: Option<String>,
    /// `datagram` (the default), `stream` or `vxlan`, for a wire that crosses nodes.
    #[serde(
        default,
        deserialize_with = "empty_is_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub carrier: Option<String>,
    /// xwire's own: what the frames this pod sends on the link suffer (delay, loss, rate
    /// and the rest: `impairment::Impairment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impairment: Option<Impairment>,
}

/// KNE (like meshnet's own examples) writes `local_ip: ""` and `peer_ip: ""` for a link
/// with no address: an empty string is the same as a field left out.
fn empty_is_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// A link as the daemon works with it: its addresses, MACs and carrier parsed, once, when
/// its topology is loaded (a stored topology passed `check`, so they parse).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpec {
    pub uid: u64,
    pub peer_pod: String,
    pub local_intf: String,
    pub peer_intf: String,
    pub local_ip: Option<(IpAddr, u8)>,
    pub peer_ip: Option<(IpAddr, u8)>,
    pub mtu: Option<u32>,
    pub local_mac: Option<[u8; 6]>,
    pub peer_mac: Option<[u8; 6]>,
    /// `None`: the peer node's carrier.
    pub carrier: Option<Carrier>,
    /// The impairment of this end's egress, when the link has one.
    pub impairment: Option<ImpairmentSpec>,
}

impl LinkSpec {
    /// The wire this link is, in the topologies of `namespace`: the one place a wire's
    /// key is made from a topology link.
    pub fn wire(&self, namespace: &str) -> WireKey {
        WireKey::new(namespace, self.uid)
    }
}

impl LinkSpec {
    /// A link to `peer_pod` on interface `intf` at both ends, with nothing else set (the
    /// tests' links).
    pub fn bare(uid: u64, peer_pod: &str, intf: &str) -> LinkSpec {
        LinkSpec {
            uid,
            peer_pod: peer_pod.into(),
            local_intf: intf.into(),
            peer_intf: intf.into(),
            local_ip: None,
            peer_ip: None,
            mtu: None,
            local_mac: None,
            peer_mac: None,
            carrier: None,
            impairment: None,
        }
    }
}

impl Link {
    /// The link with its fields parsed, or why one does not parse (naming the field).
    pub fn parse(&self) -> Result<LinkSpec, String> {
        let cidr = |field: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(parse_cidr)
                .transpose()
                .map_err(|e| format!("{field}: {e}"))
        };
        let mac = |field: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(parse_mac)
                .transpose()
                .map_err(|e| format!("{field}: {e}"))
        };
        Ok(LinkSpec {
            uid: self.uid,
            peer_pod: self.peer_pod.clone(),
            local_intf: self.local_intf.clone(),
            peer_intf: self.peer_intf.clone(),
            local_ip: cidr("local_ip", &self.local_ip)?,
            peer_ip: cidr("peer_ip", &self.peer_ip)?,
            mtu: self.mtu,
            local_mac: mac("local_mac", &self.local_mac)?,
            peer_mac: mac("peer_mac", &self.peer_mac)?,
            carrier: self
                .carrier
                .as_deref()
                .map(crate::config::carrier_name::parse)
                .transpose()?,
            impairment: self
                .impairment
                .as_ref()
                .map(|i| i.spec().map_err(|e| format!("impairment: {e}")))
                .transpose()?,
        })
    }
}

impl Topology {
    /// The links, parsed (see `LinkSpec`), by uid ascending. A link that does not parse
    /// (a topology stored without `check`) is left out, and logged.
    pub fn link_specs(&self) -> Vec<LinkSpec> {
        let mut specs: Vec<LinkSpec> = self
            .spec
            .links
            .iter()
            .filter_map(|link| match link.parse() {
                Ok(spec) => Some(spec),
                Err(e) => {
                    tracing::warn!(topology = %self.key(), uid = link.uid, "link left out: {e}");
                    None
                }
            })
            .collect();
        specs.sort_by_key(|l| l.uid);
        specs
    }

    /// `namespace/name`, the key the store uses.
    pub fn key(&self) -> String {
        pod_key(&self.metadata.namespace, &self.metadata.name)
    }

    pub fn link(&self, uid: u64) -> Option<&Link> {
        self.spec.links.iter().find(|l| l.uid == uid)
    }
}

pub fn pod_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Reads one or more Topology objects: a JSON object or array, a Kubernetes `List`, or
/// YAML with one object per document. Each is checked on its own; `check_together`
/// checks them against each other. An object of another kind is an error.
pub fn parse(text: &str) -> Result<Vec<Topology>, String> {
    let (topologies, others) = parse_mixed(text)?;
    match others.first() {
        Some(other) => Err(format!("{other} is not a Topology object")),
        None => Ok(topologies),
    }
}

/// As `parse`, for the files KNE users apply to a cluster: the Topology objects, and a
/// description (`Kind name (apiVersion)`) of each object of another kind, which the
/// caller lists as skipped (a Namespace, the Pods, ...).
pub fn parse_mixed(text: &str) -> Result<(Vec<Topology>, Vec<String>), String> {
    let values: Vec<Value> = match text.trim_start().chars().next() {
        None => return Err("no Topology objects in the input".into()),
        Some('{') | Some('[') => match serde_json::from_str(text).map_err(|e| e.to_string())? {
            Value::Array(items) => items,
            one => vec![one],
        },
        Some(_) => {
            let mut values = Vec::new();
            for document in serde_yaml_ng::Deserializer::from_str(text) {
                let value = Value::deserialize(document).map_err(|e| e.to_string())?;
                if !value.is_null() {
                    values.push(value);
                }
            }
            values
        }
    };
    let mut topologies = Vec::new();
    let mut others = Vec::new();
    for value in values.into_iter().flat_map(list_items) {
        // Another kind is listed; a Topology with another apiVersion is checked (and
        // refused with the version it has), not passed over as something else.
        let kind = value.get("kind").and_then(Value::as_str);
        let api_version = value.get("apiVersion").and_then(Value::as_str);
        if let (Some(kind), Some(api_version)) = (kind, api_version) {
            if kind != KIND {
                let name = value.pointer("/metadata/name").and_then(Value::as_str);
                others.push(format!(
                    "{kind} {} ({api_version})",
                    name.unwrap_or("(no name)")
                ));
                continue;
            }
        }
        let what = describe(&value);
        let topology: Topology =
            serde_json::from_value(value).map_err(|e| format!("{what}: {e}"))?;
        check(&topology).map_err(|e| format!("Topology {}: {e}", topology.key()))?;
        topologies.push(topology);
    }
    if topologies.is_empty() {
        return Err(match others.is_empty() {
            true => "no Topology objects in the input".into(),
            false => format!(
                "no Topology objects in the input, only {}",
                others.join(", ")
            ),
        });
    }
    check_together(&topologies)?;
    Ok((topologies, others))
}

/// A `kind: List` gives its items; anything else is one object.
fn list_items(value: Value) -> Vec<Value> {
    if value.get("kind").and_then(Value::as_str) == Some("List") {
        if let Some(Value::Array(items)) = value.get("items") {
            return items.clone();
        }
    }
    vec![value]
}

fn describe(value: &Value) -> String {
    let name = value.pointer("/metadata/name").and_then(Value::as_str);
    match name {
        Some(name) => format!("Topology {name}"),
        None => "an object without metadata.name".into(),
    }
}

/// The `peer_pod` by which meshnet means the node itself (a macvlan link to its
/// interface `peer_intf`), not a pod.
pub const MESHNET_HOST: &str = "localhost";

/// Checks one object: its kind, names, addresses and that no uid or interface repeats.
pub fn check(t: &Topology) -> Result<(), String> {
    if t.api_version != API_VERSION {
        return Err(format!(
            "apiVersion {:?}, expected {API_VERSION:?}",
            t.api_version
        ));
    }
    if t.kind != KIND {
        return Err(format!("kind {:?}, expected {KIND:?}", t.kind));
    }
    check_name("metadata.name", &t.metadata.name)?;
    check_name("metadata.namespace", &t.metadata.namespace)?;
    let mut uids = BTreeSet::new();
    let mut intfs = BTreeSet::new();
    for link in &t.spec.links {
        let at = format!("link uid {}", link.uid);
        if !uids.insert(link.uid) {
            return Err(format!("{at}: the uid is used twice"));
        }
        if link.uid > u64::from(u32::MAX) {
            return Err(format!("{at}: uids above {} are not supported", u32::MAX));
        }
        if !intfs.insert(link.local_intf.as_str()) {
            return Err(format!(
                "{at}: local_intf {:?} is used by another link",
                link.local_intf
            ));
        }
        if link.peer_pod == MESHNET_HOST {
            return Err(format!("{at}: peer_pod {MESHNET_HOST:?} is meshnet's macvlan link to the node's own interface, which xwire does not make: wire the interface to a pod, or leave the link out"));
        }
        check_name(&format!("{at}: peer_pod"), &link.peer_pod)?;
        check_ifname(&link.local_intf).map_err(|e| format!("{at}: local_intf: {e}"))?;
        check_ifname(&link.peer_intf).map_err(|e| format!("{at}: peer_intf: {e}"))?;
        link.parse().map_err(|e| format!("{at}: {e}"))?;
        if let Some(mtu) = link.mtu {
            if !(68..=MAX_LINK_MTU).contains(&mtu) {
                return Err(format!("{at}: mtu {mtu} is outside 68..={MAX_LINK_MTU}"));
            }
        }
        if link.peer_pod == t.metadata.name && link.peer_intf == link.local_intf {
            return Err(format!("{at}: a link from an interface to itself"));
        }
    }
    for (index, route) in t.spec.routes.iter().enumerate() {
        route.parse().map_err(|e| format!("routes[{index}]: {e}"))?;
    }
    Ok(())
}

/// The Topology objects of an apply, parsed and checked alone and together with what is
/// stored (an object replaces the stored one of its namespace and name). Nothing is
/// stored here; the daemon and `xwirectl topology apply --state-dir` both store the
/// result only when this passes.
pub fn check_apply(
    objects: Vec<serde_json::Value>,
    stored: &[Topology],
) -> Result<Vec<Topology>, String> {
    let mut incoming = Vec::new();
    for object in objects {
        let t: Topology =
            serde_json::from_value(object).map_err(|e| format!("not a Topology object: {e}"))?;
        check(&t).map_err(|e| format!("Topology {}: {e}", t.key()))?;
        incoming.push(t);
    }
    let mut merged: BTreeMap<String, Topology> =
        stored.iter().map(|t| (t.key(), t.clone())).collect();
    for t in &incoming {
        merged.insert(t.key(), t.clone());
    }
    let all: Vec<Topology> = merged.into_values().collect();
    check_together(&all)?;
    Ok(incoming)
}

/// Checks objects of one namespace against each other: where both ends of a uid are
/// given, they must name each other.
pub fn check_together(topologies: &[Topology]) -> Result<(), String> {
    let by_key: BTreeMap<String, &Topology> = topologies.iter().map(|t| (t.key(), t)).collect();
    for t in topologies {
        for link in &t.spec.links {
            let peer_key = pod_key(&t.metadata.namespace, &link.peer_pod);
            let Some(peer) = by_key.get(&peer_key) else {
                continue;
            };
            let Some(back) = peer.link(link.uid) else {
                continue;
            };
            let matches = back.peer_pod == t.metadata.name
                && back.local_intf == link.peer_intf
                && back.peer_intf == link.local_intf;
            if !matches {
                return Err(format!(
                    "link uid {} of {} ({} -> {}:{}) and of {} ({} -> {}:{}) do not describe the same wire",
                    link.uid,
                    t.key(),
                    link.local_intf,
                    link.peer_pod,
                    link.peer_intf,
                    peer_key,
                    back.local_intf,
                    back.peer_pod,
                    back.peer_intf
                ));
            }
        }
    }
    Ok(())
}

/// A Kubernetes name: lower-case letters, digits, '-' and '.', at most 253 bytes.
fn check_name(field: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(format!("{field} {name:?} is not a valid Kubernetes name"))
    }
}

pub fn check_ifname(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_IFNAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid interface name (1 to {MAX_IFNAME} printable characters, no '/' or ':')"
        ))
    }
}

/// `10.0.0.1/30` into address and prefix length (host bits kept: an interface's address).
pub fn parse_cidr(cidr: &str) -> Result<(IpAddr, u8), String> {
    let net: ipnet::IpNet = cidr.parse().map_err(|_| {
        format!("{cidr:?} is not an address with a prefix length (e.g. 10.0.0.1/30)")
    })?;
    Ok((net.addr(), net.prefix_len()))
}

/// `02:00:00:00:00:01` into bytes; a multicast address cannot be an interface's.
pub fn parse_mac(mac: &str) -> Result<[u8; 6], String> {
    let parsed: macaddr::MacAddr6 = mac
        .parse()
        .map_err(|_| format!("{mac:?} is not a MAC address like 02:00:00:00:00:01"))?;
    if parsed.is_multicast() {
        return Err(format!("{mac:?} is a multicast address"));
    }
    Ok(parsed.into_array())
}

pub fn format_cidr((addr, prefix): (IpAddr, u8)) -> String {
    format!("{addr}/{prefix}")
}

pub fn format_mac(mac: [u8; 6]) -> String {
    mac.map(|b| format!("{b:02x}")).join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNE_PAIR: &str = r#"
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r1
  namespace: lab
spec:
  links:
  - uid: 0
    peer_pod: r2
    local_intf: eth1
    peer_intf: eth1
    local_ip: 10.0.0.1/30
    peer_ip: 10.0.0.2/30
---
apiVersion: networkop.co.uk/v1beta1
kind: Topology
metadata:
  name: r2
  namespace: lab
spec:
  links:
  - uid: 0
    peer_pod: r1
    local_intf: eth1
    peer_intf: eth1
    mtu: 9000
    local_mac: "02:00:00:00:00:02"
    carrier: stream
"#;

    #[test]
    fn yaml_documents_and_xwire_fields_are_read() {
        let t = parse(KNE_PAIR).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].key(), "lab/r1");
        assert_eq!(t[0].spec.links[0].local_ip.as_deref(), Some("10.0.0.1/30"));
        assert_eq!(t[1].spec.links[0].mtu, Some(9000));
        assert_eq!(t[1].spec.links[0].carrier.as_deref(), Some("stream"));
    }

    /// As KNE writes them: one object per lab node, uids from 0, empty addresses.
    const KNE_AS_WRITTEN: &str = include_str!("../../tests/fixtures/kne/three-routers.yaml");

    #[test]
    fn kne_objects_with_empty_addresses_are_links_without_addresses() {
        let topologies = parse(KNE_AS_WRITTEN).unwrap();
        assert_eq!(topologies.len(), 3);
        check_together(&topologies).unwrap();
        for t in &topologies {
            check(t).unwrap();
            let specs = t.link_specs();
            assert_eq!(specs.len(), 2);
            assert!(specs
                .iter()
                .all(|l| l.local_ip.is_none() && l.peer_ip.is_none()));
        }
        // Empty MACs and carrier mean "not given" too; an address that is not empty
        // is still checked.
        let text = KNE_AS_WRITTEN.replacen(
            "peer_ip: \"\"",
            "peer_ip: \"\", local_mac: \"\", carrier: \"\"",
            1,
        );
        assert_eq!(parse(&text).unwrap()[0].spec.links[0].local_mac, None);
        let text = KNE_AS_WRITTEN.replacen("local_ip: \"\"", "local_ip: \"10.0.0.1\"", 1);
        assert!(parse(&text).unwrap_err().contains("local_ip"));
    }

    #[test]
    fn json_objects_arrays_and_lists_are_read() {
        let yaml = parse(KNE_PAIR).unwrap();
        let array = serde_json::to_string(&yaml).unwrap();
        assert_eq!(parse(&array).unwrap(), yaml);
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": yaml});
        assert_eq!(parse(&list.to_string()).unwrap(), yaml);
        let one = serde_json::to_string(&yaml[0]).unwrap();
        assert_eq!(parse(&one).unwrap(), vec![yaml[0].clone()]);
    }

    #[test]
    fn bad_objects_are_refused_with_the_reason() {
        let bad = |from: &str, to: &str, why: &str| {
            let text = KNE_PAIR.replacen(from, to, 1);
            let err = parse(&text).unwrap_err();
            assert!(err.contains(why), "{from} -> {to}: {err}");
        };
        bad(
            "kind: Topology",
            "kind: Pod",
            "Pod r1 (networkop.co.uk/v1beta1) is not a Topology object",
        );
        bad(
            "peer_pod: r2",
            "peer_pod: localhost",
            "peer_pod \"localhost\" is meshnet's macvlan link",
        );
        bad("local_ip: 10.0.0.1/30", "local_ip: 10.0.0.1", "local_ip");
        bad(
            "local_intf: eth1",
            "local_intf: a-very-long-interface",
            "local_intf",
        );
        bad("mtu: 9000", "mtu: 10", "mtu 10");
        bad(
            "\"02:00:00:00:00:02\"",
            "\"01:00:00:00:00:02\"",
            "multicast",
        );
        bad("carrier: stream", "carrier: pigeon", "pigeon");
        bad("mtu: 9000", "mtuu: 9000", "mtuu");
        bad(
            "peer_intf: eth1\n    mtu",
            "peer_intf: eth2\n    mtu",
            "do not describe the same wire",
        );
        assert!(parse("").is_err());
        assert!(parse("{").is_err());
    }

    #[test]
    fn objects_of_other_kinds_are_told_apart_from_the_topologies() {
        let namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: lab}\n---\n";
        let (topologies, others) = parse_mixed(&format!("{namespace}{KNE_PAIR}")).unwrap();
        assert_eq!(topologies, parse(KNE_PAIR).unwrap());
        assert_eq!(others, ["Namespace lab (v1)"]);
        let err = parse_mixed(namespace).unwrap_err();
        assert!(err.contains("only Namespace lab (v1)"), "{err}");
        // A Topology whose apiVersion is mistyped is an error, not something else.
        let mistyped = KNE_PAIR.replacen("networkop.co.uk/v1beta1", "networkop.co.uk/v1", 1);
        let err = parse_mixed(&mistyped).unwrap_err();
        assert!(err.contains("apiVersion \"networkop.co.uk/v1\""), "{err}");
    }

    #[test]
    fn a_repeated_uid_or_interface_is_refused() {
        let mut t = parse(KNE_PAIR).unwrap().remove(0);
        t.spec.links.push(t.spec.links[0].clone());
        assert!(check(&t).unwrap_err().contains("used twice"));
        t.spec.links[1].uid = 1;
        assert!(check(&t).unwrap_err().contains("another link"));
    }

    #[test]
    fn macs_round_trip() {
        let mac = parse_mac("02:0a:ff:00:10:01").unwrap();
        assert_eq!(format_mac(mac), "02:0a:ff:00:10:01");
        assert!(parse_mac("02:0a:ff:00:10").is_err());
        assert!(parse_mac("02:0a:ff:00:10:01:00").is_err());
    }
}
