//! `xwirectl lab import clab.yml`: a containerlab topology file as a lab file. What maps
//! is `name`, `topology.nodes` (with their `kind`s' and the `defaults`' image, cmd, env,
//! binds and exec) and `topology.links` between two nodes' interfaces (brief form,
//! `"node:iface"`, with `mtu`). Pods are spread over `--nodes` emulated nodes, round
//! robin in the order of their names. Anything else is named on the way (as a comment in the lab file), never
//! silently dropped; what cannot be a lab (links to the host, bridge kinds) is refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_yaml_ng::Value;

#[derive(Deserialize)]
struct Clab {
    name: String,
    #[serde(default)]
    topology: Topology,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
struct Topology {
    #[serde(default)]
    defaults: Node,
    #[serde(default)]
    kinds: BTreeMap<String, Node>,
    #[serde(default)]
    nodes: BTreeMap<String, Node>,
    #[serde(default)]
    links: Vec<Link>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default, Clone)]
struct Node {
    kind: Option<String>,
    image: Option<String>,
    cmd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    binds: Vec<String>,
    #[serde(default)]
    exec: Vec<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct Link {
    endpoints: Vec<String>,
    mtu: Option<u32>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// Kinds that are not a pod of their own (containerlab wires these to the host).
const NOT_PODS: [&str; 4] = ["bridge", "ovs-bridge", "host", "ext-container"];

/// Host directories that a container should not get by surprise: the host's root, or its
/// system state and configuration. containerlab passes any bind through, and so does the
/// import, but it says so.
const HOST_SYSTEM_DIRS: [&str; 8] = [
    "/etc", "/proc", "/sys", "/dev", "/boot", "/root", "/run", "/var/run",
];

/// An imported lab file, and what the person importing it should know before `lab up`.
#[derive(Debug)]
pub struct Imported {
    pub lab: String,
    /// Binds that give a container the host's own system directories, one line each.
    pub warnings: Vec<String>,
}

/// Whether `bind` (`HOST:CONTAINER[:OPTIONS]`) gives the container the host's root or one
/// of its system directories.
fn binds_host_system(bind: &str) -> bool {
    use std::path::Component;
    let host = bind.split(':').next().unwrap_or_default();
    // Lexically, as the path reads: `/tmp/../etc` is `/etc`.
    let mut normal = std::path::PathBuf::new();
    for part in Path::new(host).components() {
        match part {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal == Path::new("/") || HOST_SYSTEM_DIRS.iter().any(|dir| normal.starts_with(dir))
}

/// The lab file for the containerlab topology `text` (read from `file`, whose directory
/// relative bind paths are taken from), with its pods on `nodes` nodes. The result is
/// checked as `lab up` would check it.
pub fn import(text: &str, file: &Path, nodes: usize) -> Result<Imported> {
    let clab: Clab = serde_yaml_ng::from_str(text).context("not a containerlab topology")?;
    if nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let base = std::fs::canonicalize(
        file.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
    .unwrap_or_else(|_| Path::new(".").to_path_buf());
    let mut warnings = Vec::new();
    let mut ignored: Vec<String> = clab.other.keys().cloned().collect();
    ignored.extend(clab.topology.other.keys().map(|k| format!("topology.{k}")));
    let name = lab_name(&clab.name)?;
    let node_names: Vec<String> = (1..=nodes).map(|i| format!("node-{i}")).collect();
    let mut out = format!(
        "# Imported from {} by `xwirectl lab import`.\nname: {name}\nnodes: [{}]\npods:\n",
        file.display(),
        node_names.join(", ")
    );
    let mut pod_names = BTreeMap::new();
    for (index, (clab_name, node)) in clab.topology.nodes.iter().enumerate() {
        let pod = pod_name(clab_name)?;
        let kind = node
            .kind
            .clone()
            .or_else(|| clab.topology.defaults.kind.clone())
            .unwrap_or_else(|| "linux".into());
        if NOT_PODS.contains(&kind.as_str()) {
            bail!("node {clab_name} is of kind {kind}, which a lab has no pod for (containerlab joins it to the host)");
        }
        let layers = [
            &clab.topology.defaults,
            clab.topology.kinds.get(&kind).unwrap_or(&Node::default()),
            node,
        ]
        .map(Clone::clone);
        let pick = |f: fn(&Node) -> Option<String>| layers.iter().rev().find_map(f);
        let image = pick(|n| n.image.clone());
        let cmd = pick(|n| n.cmd.clone());
        let env: BTreeMap<String, String> = layers.iter().flat_map(|n| n.env.clone()).collect();
        let binds: Vec<String> = layers
            .iter()
            .flat_map(|n| n.binds.clone())
            .map(|b| {
                if b.starts_with('/') {
                    b
                } else {
                    format!("{}/{b}", base.display())
                }
            })
            .collect();
        let exec = layers
            .iter()
            .rev()
            .map(|n| n.exec.clone())
            .find(|e| !e.is_empty())
            .unwrap_or_default();
        for (layer, label) in layers.iter().zip(["defaults", "kinds", "node"]) {
            for key in layer.other.keys() {
                ignored.push(format!("{label} {clab_name}: {key}"));
            }
        }
        writeln!(out, "  {pod}:\n    node: {}", node_names[index % nodes])?;
        if let Some(image) = image {
            writeln!(out, "    image: {}", quoted(&image))?;
            if let Some(cmd) = cmd {
                let words = shell_words::split(&cmd)
                    .with_context(|| format!("node {clab_name}: cmd {cmd:?}"))?;
                let words: Vec<String> = words.iter().map(|w| quoted(w)).collect();
                writeln!(out, "    cmd: [{}]", words.join(", "))?;
            }
            if !env.is_empty() {
                writeln!(out, "    env:")?;
                for (key, value) in &env {
                    writeln!(out, "      {}: {}", quoted(key), quoted(value))?;
                }
            }
            warnings.extend(binds.iter().filter(|b| binds_host_system(b)).map(|b| {
                format!("pod {pod} binds the host's {b:?}: the container sees the host's own files, and may change them unless the bind is :ro")
            }));
            for (field, list) in [("binds", &binds), ("exec", &exec)] {
                if !list.is_empty() {
                    writeln!(out, "    {field}:")?;
                    for item in list {
                        writeln!(out, "      - {}", quoted(item))?;
                    }
                }
            }
        } else if cmd.is_some() || !env.is_empty() || !binds.is_empty() || !exec.is_empty() {
            ignored.push(format!(
                "node {clab_name}: cmd, env, binds and exec (it has no image)"
            ));
        }
        pod_names.insert(clab_name.clone(), pod);
    }
    out.push_str("links:\n");
    for link in &clab.topology.links {
        let [a, b] = link.endpoints.as_slice() else {
            bail!("link {:?}: a link has two endpoints", link.endpoints);
        };
        let mut ends = Vec::new();
        for end in [a, b] {
            let (node, iface) = end
                .split_once(':')
                .with_context(|| format!("link endpoint {end:?} is not NODE:INTERFACE"))?;
            let Some(pod) = pod_names.get(node) else {
                bail!("link endpoint {end}: {node} is not a node of the topology (host, mgmt-net and macvlan endpoints have no place in a lab)");
            };
            ends.push(format!("{pod}:{iface}"));
        }
        writeln!(out, "  - endpoints: [{}, {}]", ends[0], ends[1])?;
        if let Some(mtu) = link.mtu {
            writeln!(out, "    mtu: {mtu}")?;
        }
        ignored.extend(link.other.keys().map(|k| format!("link {a} {b}: {k}")));
    }
    if !ignored.is_empty() {
        out.push_str("# Not imported (no lab field means the same):\n");
        for what in &ignored {
            writeln!(out, "#   {what}")?;
        }
    }
    if !warnings.is_empty() {
        out.push_str("# Warning:\n");
        for warning in &warnings {
            writeln!(out, "#   {warning}")?;
        }
    }
    super::file::parse(&out, None)
        .map_err(|e| anyhow::anyhow!("the imported lab is not valid: {e}\n{out}"))?;
    Ok(Imported { lab: out, warnings })
}

/// A containerlab name as a lab or pod name: lower case, with '-' for '_' and '.'.
fn converted(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

fn lab_name(name: &str) -> Result<String> {
    let lab = converted(name);
    super::file::check_lab_name(&lab)
        .map_err(|e| anyhow::anyhow!("topology name {name:?}: {e}"))?;
    Ok(lab)
}

fn pod_name(name: &str) -> Result<String> {
    let pod = converted(name);
    let valid = pod.starts_with(|c: char| c.is_ascii_lowercase())
        && pod.len() <= 63
        && pod
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!("node name {name:?} cannot be a pod name (lower-case letters, digits and '-', starting with a letter)");
    }
    Ok(pod)
}

/// A YAML double-quoted string.
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAB: &str = r#"
name: srl_frr
mgmt: {network: custom}
topology:
  defaults: {env: {SITE: lab}}
  kinds:
    linux: {image: "localhost/frr:9"}
  nodes:
    R1: {kind: linux, binds: [conf/r1:/etc/frr], exec: ["ip link set lo up"]}
    r2: {kind: linux, cmd: "sh -c 'sleep 1000'", startup-config: r2.cfg}
    client_1: {kind: linux, image: "localhost/alpine"}
  links:
    - endpoints: ["R1:eth1", "r2:eth1"]
      mtu: 9000
    - endpoints: ["r2:eth2", "client_1:eth1"]
"#;

    #[test]
    fn nodes_links_kinds_and_defaults_map_and_the_rest_is_named() {
        let imported = import(CLAB, Path::new("/labs/clab.yml"), 2).unwrap();
        assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
        let text = imported.lab;
        let lab = super::super::file::parse(&text, None).unwrap();
        assert_eq!(lab.name, "srl-frr");
        assert_eq!(lab.nodes, ["node-1", "node-2"]);
        // Round robin in the order of the nodes' names as written (upper case first).
        assert_eq!(lab.pods["r1"], "node-1");
        assert_eq!(lab.pods["client-1"], "node-2");
        assert_eq!(lab.pods["r2"], "node-1");
        let r1 = &lab.containers["r1"];
        assert_eq!(r1.image, "localhost/frr:9");
        assert_eq!(r1.env["SITE"], "lab");
        assert!(r1.binds[0].ends_with("conf/r1:/etc/frr"), "{:?}", r1.binds);
        assert_eq!(r1.exec, ["ip link set lo up"]);
        assert_eq!(
            lab.containers["r2"].cmd.as_deref().unwrap(),
            ["sh", "-c", "sleep 1000"]
        );
        assert_eq!(lab.containers["client-1"].image, "localhost/alpine");
        assert_eq!(lab.links[0].endpoints[0].to_string(), "r1:eth1");
        assert_eq!(lab.links[0].mtu, Some(9000));
        assert!(text.contains("#   mgmt"), "{text}");
        assert!(text.contains("#   node r2: startup-config"), "{text}");
    }

    #[test]
    fn what_a_lab_cannot_be_is_refused() {
        let host = CLAB.replace("\"client_1:eth1\"", "\"host:veth9\"");
        let e = import(&host, Path::new("x.yml"), 1).unwrap_err();
        assert!(e.to_string().contains("host is not a node"), "{e}");
        let bridge = CLAB.replace("client_1: {kind: linux,", "client_1: {kind: bridge,");
        let e = import(&bridge, Path::new("x.yml"), 1).unwrap_err();
        assert!(e.to_string().contains("kind bridge"), "{e}");
    }

    #[test]
    fn a_bind_of_the_hosts_system_directories_is_passed_through_with_a_warning() {
        let clab = CLAB.replace(
            "binds: [conf/r1:/etc/frr]",
            "binds: [\"/:/host\", \"/etc/../proc:/p:ro\", \"/etcetera:/x\"]",
        );
        let imported = import(&clab, Path::new("x.yml"), 1).unwrap();
        assert_eq!(imported.warnings.len(), 2, "{:?}", imported.warnings);
        assert!(
            imported.warnings[0].contains("\"/:/host\""),
            "{:?}",
            imported.warnings
        );
        assert!(imported.lab.contains("# Warning:"), "{}", imported.lab);
        let lab = super::super::file::parse(&imported.lab, None).unwrap();
        assert_eq!(lab.containers["r1"].binds[0], "/:/host");
    }

    #[test]
    fn a_host_system_directory_is_recognised_through_dots() {
        assert!(binds_host_system("/tmp/../etc:/x"));
        assert!(binds_host_system("/./proc/1:/p:ro"));
        assert!(binds_host_system("/..:/host"));
        assert!(!binds_host_system("/etc/../tmp:/t"));
        assert!(!binds_host_system("conf/r1:/etc/frr"));
    }
}
