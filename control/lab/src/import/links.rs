//! containerlab's links as lab links. Both forms a file may use are read: the brief
//! `endpoints: ["a:e1", "b:e1"]` and the extended one (`type: veth` with
//! `endpoints: [{node, interface}, ...]`). A lab wire joins two pods, so the other
//! extended types (`host`, `mgmt-net`, `macvlan`, `vxlan`, `vxlan-stitch`, `veth-stitch`,
//! `dummy`) and brief endpoints on the host's side (`host:`, `mgmt-net:`, `macvlan:`) are
//! refused by name, with the line of the user's file.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde::Deserialize;
use serde_yaml_ng::Value;

/// A link between two nodes' interfaces, by containerlab node name.
#[derive(Debug, PartialEq)]
pub(super) struct NodeLink {
    pub(super) ends: [(String, String); 2],
    pub(super) mtu: Option<u32>,
    /// The link's keys no lab field carries (`vars`, `labels`, an endpoint's `mac`).
    pub(super) not_carried: Vec<String>,
}

#[derive(Deserialize)]
struct Link {
    #[serde(rename = "type")]
    kind: Option<String>,
    endpoints: Option<Vec<Value>>,
    mtu: Option<u32>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct ExtendedEnd {
    node: String,
    interface: String,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// Brief endpoints whose "node" is the host's side of a containerlab link.
const HOST_SIDES: [&str; 3] = ["host", "mgmt-net", "macvlan"];

/// Link `value`, found at `line` of the file.
pub(super) fn read(value: &Value, line: usize) -> Result<NodeLink> {
    let at = |message: String| anyhow::anyhow!("line {line}: {message}");
    let link: Link = serde_yaml_ng::from_value(value.clone())
        .map_err(|e| at(format!("not a containerlab link: {e}")))?;
    let mut not_carried: Vec<String> = super::clab::set_keys(&link.other)
        .map(str::to_owned)
        .collect();
    let ends = match link.kind.as_deref() {
        None => {
            let endpoints = link.endpoints.unwrap_or_default();
            let mut ends = Vec::new();
            for end in &endpoints {
                let Some(end) = end.as_str() else {
                    bail!(at("a link without `type:` is the brief form, whose endpoints are \"NODE:INTERFACE\" strings; with `{node, interface}` endpoints, say `type: veth`".into()));
                };
                let Some((node, iface)) = end.split_once(':') else {
                    bail!(at(format!("link endpoint {end:?} is not NODE:INTERFACE")));
                };
                if HOST_SIDES.contains(&node) {
                    bail!(at(format!("link endpoint {end:?} is a brief-form `{node}` link, which joins a node to the host's side: a lab wire joins two pods")));
                }
                ends.push((node.to_owned(), iface.to_owned()));
            }
            ends
        }
        Some("veth") => {
            let mut ends = Vec::new();
            for end in link.endpoints.unwrap_or_default() {
                let end: ExtendedEnd = serde_yaml_ng::from_value(end).map_err(|e| {
                    at(format!(
                        "a `type: veth` endpoint is {{node, interface}}: {e}"
                    ))
                })?;
                not_carried
                    .extend(super::clab::set_keys(&end.other).map(|k| format!("endpoints.{k}")));
                ends.push((end.node, end.interface));
            }
            ends
        }
        Some(
            kind @ ("host" | "mgmt-net" | "macvlan" | "vxlan" | "vxlan-stitch" | "veth-stitch"
            | "dummy"),
        ) => {
            bail!(at(format!("a `type: {kind}` link has one end in a node and the other outside the lab (or none): a lab wire joins two pods")))
        }
        Some(other) => bail!(at(format!(
            "link type {other:?} is not one containerlab has"
        ))),
    };
    let Ok(ends) = <[(String, String); 2]>::try_from(ends) else {
        bail!(at("a link has two endpoints".into()));
    };
    Ok(NodeLink {
        ends,
        mtu: link.mtu,
        not_carried,
    })
}

/// The line (from 1) of each of `text`'s `topology.links` entries, in order; 0 where it
/// cannot be told.
pub(super) fn lines(text: &str) -> Vec<usize> {
    let Ok(root) = marked_yaml::parse_yaml(0, text) else {
        return Vec::new();
    };
    let links = root
        .as_mapping()
        .and_then(|m| m.get_mapping("topology"))
        .and_then(|t| t.get_sequence("links"));
    links
        .map(|links| {
            links
                .iter()
                .map(|l| l.span().start().map_or(0, |m| m.line()))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(yaml: &str) -> Result<NodeLink> {
        read(&serde_yaml_ng::from_str(yaml).unwrap(), 7)
    }

    #[test]
    fn both_forms_of_a_veth_link_read_the_same() {
        let brief = link(r#"{endpoints: ["r1:eth1", "r2:eth1"], mtu: 9000}"#).unwrap();
        let extended = link(
            "{type: veth, mtu: 9000, endpoints: [{node: r1, interface: eth1}, {node: r2, interface: eth1}]}",
        )
        .unwrap();
        assert_eq!(brief, extended);
        assert_eq!(brief.ends[1], ("r2".to_string(), "eth1".to_string()));
        let with_mac = link(
            "{type: veth, vars: {a: 1}, endpoints: [{node: r1, interface: e1, mac: 'aa:c1:ab:00:00:01'}, {node: r2, interface: e1}]}",
        )
        .unwrap();
        assert_eq!(with_mac.not_carried, ["vars", "endpoints.mac"]);
    }

    #[test]
    fn links_to_the_hosts_side_are_refused_by_form_and_line() {
        for (yaml, form) in [
            (r#"{endpoints: ["r1:eth1", "host:veth9"]}"#, "`host` link"),
            (
                r#"{endpoints: ["r1:eth1", "macvlan:enp0s3"]}"#,
                "`macvlan` link",
            ),
            (
                "{type: vxlan, endpoint: {node: r1, interface: e1}, remote: 192.0.2.1, vni: 10}",
                "`type: vxlan`",
            ),
            (
                "{type: mgmt-net, endpoint: {node: r1, interface: e1}, host-interface: x}",
                "`type: mgmt-net`",
            ),
            (
                "{type: dummy, endpoint: {node: r1, interface: e1}}",
                "`type: dummy`",
            ),
        ] {
            let e = link(yaml).unwrap_err().to_string();
            assert!(e.starts_with("line 7: ") && e.contains(form), "{yaml}: {e}");
        }
        let e = link(r#"{endpoints: ["r1:eth1"]}"#).unwrap_err().to_string();
        assert!(e.contains("two endpoints"), "{e}");
    }

    #[test]
    fn each_link_is_found_on_its_line() {
        let text = "name: x\ntopology:\n  links:\n    - endpoints: [a:e1, b:e1]\n\n    - type: veth\n      endpoints: []\n";
        assert_eq!(lines(text), [4, 6]);
    }
}
