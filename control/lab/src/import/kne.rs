//! `xwirectl lab import topo.pb.txt`: KNE's own topology file, protobuf text format of
//! its `topo.Topology` message. The text is parsed against KNE's schema
//! (`kne_topo.proto`, compiled by build.rs) by prost-reflect, then read through serde.
//!
//! What maps: each node as a pod (its `config.image`, `config.command` then
//! `config.args` as the command, `config.env`, `labels`, and its vendor, model, os and
//! version as the labels `kne-vendor`, `kne-model`, `kne-os`, `kne-version`), and each
//! link (`a_node:a_int` to `z_node:z_int`). What has no lab field (services, constraints,
//! interfaces, certificates, startup config, ...) is named in one warning per field.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use prost_reflect::{DescriptorPool, DynamicMessage, SerializeOptions};
use serde::Deserialize;
use serde_json::Value;

use super::{Imported, LabOut, LinkOut, NotCarried, PodOut};

/// KNE's schema, as build.rs compiled it.
const SCHEMA: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kne_topo.bin"));

/// File names KNE's text-format topologies go by.
const SUFFIXES: [&str; 4] = [".pb.txt", ".pbtxt", ".textproto", ".prototxt"];

pub(super) fn is_kne_file(file: &Path) -> bool {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    SUFFIXES.iter().any(|s| name.ends_with(s))
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Topology {
    name: String,
    nodes: Vec<Node>,
    links: Vec<Link>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Node {
    name: String,
    vendor: Option<String>,
    model: String,
    os: String,
    version: String,
    labels: BTreeMap<String, String>,
    config: Config,
    /// Every other field the node sets (services, constraints, interfaces, ...).
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Config {
    command: Vec<String>,
    args: Vec<String>,
    image: String,
    env: BTreeMap<String, String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Link {
    a_node: String,
    a_int: String,
    z_node: String,
    z_int: String,
}

/// The KNE topology `text` as a lab file, its pods on `nodes` nodes.
pub(super) fn import(
    text: &str,
    file: &Path,
    nodes: usize,
    name: Option<&str>,
) -> Result<Imported> {
    let topology = parse(text)?;
    let mut warnings = Vec::new();
    let mut not_carried = NotCarried::default();
    if topology.name.is_empty() && name.is_none() {
        bail!("the file has no `name`; give the lab one with --name");
    }
    let lab_name = super::choose_name(&topology.name, name, &mut warnings)?;
    let node_names = super::node_names(nodes)?;
    let mut kne_nodes: Vec<&Node> = topology.nodes.iter().collect();
    kne_nodes.sort_by(|a, b| a.name.cmp(&b.name));
    let mut pods = BTreeMap::new();
    let mut pod_names = BTreeMap::new();
    let mut imageless = Vec::new();
    let mut renamed = Vec::new();
    for (index, node) in kne_nodes.iter().enumerate() {
        let (pod_name, was_renamed) = super::pod_name(&node.name)?;
        if was_renamed {
            renamed.push((node.name.clone(), pod_name.clone()));
        }
        if pod_names
            .insert(node.name.clone(), pod_name.clone())
            .is_some()
        {
            bail!("node {} is named twice", node.name);
        }
        let place = format!("node {}", node.name);
        for key in node.other.keys() {
            not_carried.add(key.clone(), place.clone());
        }
        for key in node.config.other.keys() {
            not_carried.add(format!("config.{key}"), place.clone());
        }
        let config = &node.config;
        let mut pod = PodOut::on(node_names[index % nodes].clone());
        if config.image.is_empty() {
            imageless.push(node.name.clone());
        } else {
            pod.image = Some(config.image.clone());
            let cmd: Vec<String> = config.command.iter().chain(&config.args).cloned().collect();
            pod.cmd = (!cmd.is_empty()).then_some(cmd);
            pod.env = config.env.clone();
            pod.labels = labels_of(node);
        }
        pods.insert(pod_name, pod);
    }
    warnings.extend(super::renamed_warning(&renamed));
    if !imageless.is_empty() {
        warnings.push(format!(
            "nodes {} have no config.image: KNE would run its vendor's default image; here each is a bare namespace",
            imageless.join(", ")
        ));
    }
    let links = links_out(&topology.links, &pod_names)?;
    let out = LabOut {
        name: lab_name,
        nodes: node_names,
        pods,
        links,
    };
    super::finish(file, &out, not_carried, warnings)
}

/// The lab's links from the topology's, each end as POD:IF.
fn links_out(links: &[Link], pod_names: &BTreeMap<String, String>) -> Result<Vec<LinkOut>> {
    let mut out = Vec::new();
    for (index, link) in links.iter().enumerate() {
        let mut ends = Vec::new();
        for (node, iface) in [(&link.a_node, &link.a_int), (&link.z_node, &link.z_int)] {
            let Some(pod) = pod_names.get(node) else {
                bail!(
                    "links[{index}] ({}:{} to {}:{}): {node:?} is not a node of the topology",
                    link.a_node,
                    link.a_int,
                    link.z_node,
                    link.z_int
                );
            };
            if iface.is_empty() {
                bail!("links[{index}]: node {node} has no interface named");
            }
            ends.push(format!("{pod}:{iface}"));
        }
        let [a, b] = <[String; 2]>::try_from(ends).expect("two ends");
        out.push(LinkOut {
            endpoints: [a, b],
            mtu: None,
        });
    }
    Ok(out)
}

/// A node's labels, with its vendor, model, OS and version as `kne-*` labels where it
/// names them (a label of the same name in the file wins).
fn labels_of(node: &Node) -> BTreeMap<String, String> {
    let mut labels = node.labels.clone();
    for (key, value) in [
        ("kne-vendor", node.vendor.clone().unwrap_or_default()),
        ("kne-model", node.model.clone()),
        ("kne-os", node.os.clone()),
        ("kne-version", node.version.clone()),
    ] {
        if !value.is_empty() {
            labels.entry(key.into()).or_insert(value);
        }
    }
    labels
}

/// `text` read as KNE's `topo.Topology`, by its schema: a field KNE does not have, or a
/// value of the wrong type, is an error with its place in the text.
fn parse(text: &str) -> Result<Topology> {
    let pool = DescriptorPool::decode(SCHEMA).expect("build.rs wrote a valid schema");
    let descriptor = pool
        .get_message_by_name("topo.Topology")
        .expect("the schema has topo.Topology");
    let message = DynamicMessage::parse_text_format(descriptor, text).map_err(|e| {
        anyhow::anyhow!("not a KNE topology (protobuf text format of topo.Topology): {e}")
    })?;
    // The JSON mapping with the schema's own field names (a_node, not aNode).
    let options = SerializeOptions::new().use_proto_field_name(true);
    let json = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .context("reading the topology")?;
    serde_json::from_value(json).context("reading the topology")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::parse as parse_lab;

    /// KNE's own form: a host node, a vendor's router with config, and two links.
    const TOPO: &str = r#"
name: "2node-ceos"
nodes: {
    name: "r1"
    vendor: ARISTA
    model: "ceos"
    os: "eos"
    config: {
        image: "ceos:latest"
        command: "/sbin/init"
        args: "systemd.setenv=INTFTYPE=eth"
        env: { key: "CEOS" value: "1" }
        config_path: "/mnt/flash"
        config_file: "startup-config"
        file: "r1.cfg"
        cert: { self_signed: { cert_name: "gnmiCert.pem" key_name: "gnmiCertKey.pem" key_size: 4096 } }
    }
    services: { key: 6030 value: { name: "gnmi" inside: 6030 } }
    labels: { key: "role" value: "spine" }
}
nodes: {
    name: "vm-1"
    vendor: HOST
}
links: { a_node: "r1" a_int: "eth1" z_node: "vm-1" z_int: "eth1" }
links: { a_node: "r1" a_int: "eth2" z_node: "vm-1" z_int: "eth2" }
"#;

    #[test]
    fn a_kne_topology_becomes_pods_and_links_and_the_rest_is_named() {
        let imported = import(TOPO, Path::new("2node.pb.txt"), 2, None).unwrap();
        let lab = parse_lab(&imported.lab, None).unwrap();
        assert_eq!(lab.name, "lab-2node-ceos");
        assert_eq!(lab.pods["r1"], "node-1");
        assert_eq!(lab.pods["vm-1"], "node-2");
        let r1 = &lab.containers["r1"];
        assert_eq!(r1.image, "ceos:latest");
        assert_eq!(
            r1.cmd.as_deref().unwrap(),
            ["/sbin/init", "systemd.setenv=INTFTYPE=eth"]
        );
        assert_eq!(r1.env["CEOS"], "1");
        assert_eq!(r1.labels["role"], "spine");
        assert_eq!(r1.labels["kne-vendor"], "ARISTA");
        assert_eq!(r1.labels["kne-os"], "eos");
        assert!(!lab.containers.contains_key("vm-1"));
        assert_eq!(lab.links.len(), 2);
        assert_eq!(lab.links[1].endpoints[1].to_string(), "vm-1:eth2");
        let w = &imported.warnings;
        for field in [
            "config.cert",
            "config.config_path",
            "config.file",
            "services",
        ] {
            assert!(
                w.iter()
                    .any(|l| l.starts_with(&format!("`{field}` is not carried"))),
                "{field}: {w:#?}"
            );
        }
        assert!(
            w.iter()
                .any(|l| l.contains("nodes vm-1 have no config.image")),
            "{w:#?}"
        );
    }

    #[test]
    fn a_field_kne_does_not_have_or_a_link_to_no_node_is_an_error() {
        let e = import("name: \"x\"\nnodez: {}\n", Path::new("x.pb.txt"), 1, None).unwrap_err();
        assert!(e.to_string().contains("not a KNE topology"), "{e}");
        assert!(e.to_string().contains("nodez"), "{e}");
        let text = TOPO.replace(
            "z_node: \"vm-1\" z_int: \"eth2\"",
            "z_node: \"vm-9\" z_int: \"eth2\"",
        );
        let e = import(&text, Path::new("x.pb.txt"), 1, None).unwrap_err();
        assert!(e.to_string().contains("\"vm-9\" is not a node"), "{e}");
    }

    #[test]
    fn a_node_named_with_a_digit_first_is_a_pod_named_with_a_letter_first() {
        let text = TOPO.replace("\"vm-1\"", "\"8000e\"");
        let imported = import(&text, Path::new("x.pb.txt"), 1, Some("cisco")).unwrap();
        let lab = parse_lab(&imported.lab, None).unwrap();
        assert_eq!(lab.links[0].endpoints[1].to_string(), "n-8000e:eth1");
        assert!(imported
            .warnings
            .iter()
            .any(|w| w.contains("8000e is pod n-8000e")));
    }

    #[test]
    fn the_file_name_says_which_format() {
        assert!(is_kne_file(Path::new("/x/topo.pb.txt")));
        assert!(is_kne_file(Path::new("t.textproto")));
        assert!(!is_kne_file(Path::new("lab.clab.yml")));
    }
}
