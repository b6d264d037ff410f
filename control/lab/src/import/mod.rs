//! `xwirectl lab import clab.yml`: a containerlab topology file as a lab file.
//!
//! The file is read as containerlab reads it: the environment's variables expanded first
//! (`vars.rs`), each node's settings resolved through `defaults`, `kinds`, `groups` and
//! the node (`clab.rs`), the node placeholders replaced, and links in either form
//! (`links.rs`). What maps: the nodes (as pods, spread over `--nodes` emulated nodes
//! round robin in the order of their names) with image, its pull policy, cmd, env, labels (the node's
//! kind kept as the label `clab-node-kind`, as containerlab labels its containers), binds
//! and exec; and links between two nodes' interfaces, with `mtu`. Every field that has no
//! lab field is named in one warning (with the nodes or links that set it), never dropped
//! silently; what cannot be a lab (links to the host's side, bridge kinds) is refused
//! with the line of the user's file.

mod aliases;
mod clab;
mod kinds;
mod kne;
mod links;
mod vars;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

/// Kinds that are not a pod of their own (containerlab wires these to the host).
const NOT_PODS: [&str; 4] = ["bridge", "ovs-bridge", "host", "ext-container"];

/// The label containerlab gives a container for its node's kind.
const KIND_LABEL: &str = "clab-node-kind";

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
    /// One line per field not carried, per name the lab was given instead of the file's,
    /// and per bind that gives a container the host's own system directories.
    pub warnings: Vec<String>,
}

/// The lab file as written (field names and layout of `file.rs`).
#[derive(Serialize)]
struct LabOut {
    name: String,
    nodes: Vec<String>,
    pods: BTreeMap<String, PodOut>,
    links: Vec<LinkOut>,
}

#[derive(Serialize)]
struct PodOut {
    node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cmd: Option<Vec<String>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    image_pull_policy: Option<super::file::PullPolicy>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    binds: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    exec: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    save: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    interface_names: BTreeMap<String, String>,
}

impl PodOut {
    /// A pod on `node`, with no container until its fields are set.
    fn on(node: String) -> PodOut {
        PodOut {
            node,
            image: None,
            cmd: None,
            env: BTreeMap::new(),
            labels: BTreeMap::new(),
            image_pull_policy: None,
            binds: Vec::new(),
            exec: Vec::new(),
            save: None,
            interface_names: BTreeMap::new(),
        }
    }
}

#[derive(Serialize)]
struct LinkOut {
    endpoints: [String; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
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

/// Fields not carried, each with where it was set: one warning per field.
#[derive(Default)]
struct NotCarried(BTreeMap<String, Vec<String>>);

impl NotCarried {
    fn add(&mut self, field: impl Into<String>, place: impl Into<String>) {
        let places = self.0.entry(field.into()).or_default();
        let place = place.into();
        if !places.contains(&place) {
            places.push(place);
        }
    }

    /// What node `clab_node`'s settings hold that its pod cannot carry: keys no field
    /// reads, at the level that set them; ports and startup config; and, on a node
    /// without an image, everything a container would have used.
    fn add_node(&mut self, clab_node: &str, node: &clab::Resolved) {
        let place = format!("node {clab_node}");
        for (level, key) in &node.other {
            let place = match *level {
                "nodes" => place.clone(),
                level => format!("{level} (for node {clab_node})"),
            };
            self.add(key.clone(), place);
        }
        for (field, set) in [
            ("ports", !node.ports.is_empty()),
            ("startup-config", node.startup_config.is_some()),
        ] {
            if set {
                self.add(field, place.clone());
            }
        }
        if node.image.is_some() {
            return;
        }
        for (field, set) in [
            ("cmd", node.cmd.is_some()),
            ("env", !node.env.is_empty()),
            ("labels", !node.labels.is_empty()),
            ("image-pull-policy", node.image_pull_policy.is_some()),
            ("binds", !node.binds.is_empty()),
            ("exec", !node.exec.is_empty()),
        ] {
            if set {
                self.add(field, format!("{place}, which has no image"));
            }
        }
    }

    fn warnings(self) -> impl Iterator<Item = String> {
        self.0.into_iter().map(|(field, places)| {
            format!(
                "`{field}` is not carried into the lab (set in {})",
                places.join(", ")
            )
        })
    }
}

/// The lab file for the containerlab topology `text` (read from `file`, whose directory
/// relative bind paths are taken from), with its pods on `nodes` nodes, named `name` if
/// given (else after the file's `name:`). The result is checked as `lab up` would check
/// it.
pub fn import(text: &str, file: &Path, nodes: usize, name: Option<&str>) -> Result<Imported> {
    if kne::is_kne_file(file) {
        return kne::import(text, file, nodes, name);
    }
    import_with_env(text, file, nodes, name, |var| std::env::var(var).ok())
}

fn import_with_env(
    text: &str,
    file: &Path,
    nodes: usize,
    name: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Imported> {
    let text = vars::expand_env(text, env);
    let clab: clab::Clab = serde_yaml_ng::from_str(&text).context("not a containerlab topology")?;
    let Some(topology) = clab.topology else {
        bail!("the file has no `topology:`, so no nodes and no links: not a containerlab topology");
    };
    let clab_name = match (&clab.name, name) {
        (_, Some(given)) => given.to_owned(),
        (Some(named), None) => named.clone(),
        (None, None) => bail!("the file has no `name:`; give the lab one with --name"),
    };
    let base = super::containers::directory_of(file);
    let mut warnings = Vec::new();
    let mut not_carried = NotCarried::default();
    for key in clab::set_keys(&clab.other) {
        not_carried.add(key.to_owned(), "the file");
    }
    for key in clab::set_keys(&topology.other) {
        not_carried.add(format!("topology.{key}"), "the file");
    }
    let lab_name = choose_name(&clab_name, name, &mut warnings)?;
    let node_names = node_names(nodes)?;
    let mut pods = BTreeMap::new();
    let mut pod_names = BTreeMap::new();
    let mut renamed = Vec::new();
    let mut node_kinds = BTreeMap::new();
    for (index, clab_node) in topology.nodes.keys().enumerate() {
        let (pod_name, was_renamed) = pod_name(clab_node)?;
        if was_renamed {
            renamed.push((clab_node.clone(), pod_name.clone()));
        }
        let node = topology.resolve(clab_node);
        let kind = node.kind.clone().unwrap_or_else(|| "linux".into());
        if NOT_PODS.contains(&kind.as_str()) {
            bail!("node {clab_node} is of kind {kind}, which a lab has no pod for (containerlab joins it to the host)");
        }
        node_kinds.insert(clab_node.clone(), kind.clone());
        not_carried.add_node(clab_node, &node);
        let placeholders = vars::Placeholders::new(&base, &clab_name, clab_node);
        let mut pod = PodOut::on(node_names[index % nodes].clone());
        if let Some(image) = &node.image {
            let host = ImageNode {
                clab_node,
                kind: &kind,
                base: &base,
                placeholders: &placeholders,
            };
            host.fill(&mut pod, &node, &pod_name, &mut warnings)?;
            pod.image = Some(image.clone());
        }
        pods.insert(pod_name.clone(), pod);
        pod_names.insert(clab_node.clone(), pod_name);
    }
    warnings.extend(renamed_warning(&renamed));
    warnings.extend(kinds_warning(&pods));
    let (lab_links, mapped) = links_out(
        &text,
        &topology.links,
        &pod_names,
        &node_kinds,
        &mut pods,
        &mut not_carried,
    )?;
    warnings.extend(mapped_warning(mapped));
    let out = LabOut {
        name: lab_name,
        nodes: node_names,
        pods,
        links: lab_links,
    };
    finish(file, &out, not_carried, warnings)
}

/// What filling a pod from a node with an image needs to know of the node and the file.
struct ImageNode<'a> {
    clab_node: &'a str,
    kind: &'a str,
    base: &'a Path,
    placeholders: &'a vars::Placeholders,
}

impl ImageNode<'_> {
    /// Carries the node's command, environment, labels, pull policy, binds, exec and save
    /// command into `pod`; a bind of the host's system directories is warned of.
    fn fill(
        &self,
        pod: &mut PodOut,
        node: &clab::Resolved,
        pod_name: &str,
        warnings: &mut Vec<String>,
    ) -> Result<()> {
        let clab_node = self.clab_node;
        if let Some(cmd) = &node.cmd {
            let words = shell_words::split(cmd)
                .with_context(|| format!("node {clab_node}: cmd {cmd:?}"))?;
            pod.cmd = Some(words);
        }
        pod.env = node.env.clone();
        pod.labels = node.labels.clone();
        if let Some(policy) = &node.image_pull_policy {
            let parsed = super::file::PullPolicy::parse(policy).with_context(|| {
                format!("node {clab_node}: image-pull-policy {policy:?} is not IfNotPresent, Always or Never")
            })?;
            pod.image_pull_policy = Some(parsed);
        }
        if let Some(kind) = &node.kind {
            pod.labels
                .entry(KIND_LABEL.into())
                .or_insert_with(|| kind.clone());
        }
        pod.binds = node
            .binds
            .iter()
            .map(|b| {
                super::containers::absolute_bind(self.base, &self.placeholders.replace_in_bind(b))
            })
            .collect();
        pod.exec = node
            .exec
            .iter()
            .map(|e| self.placeholders.replace(e))
            .collect();
        pod.save = kinds::save_command(self.kind).map(str::to_owned);
        warnings.extend(pod.binds.iter().filter(|b| binds_host_system(b)).map(|b| {
            format!("pod {pod_name} binds the host's {b:?}: the container sees the host's own files, and may change them unless the bind is :ro")
        }));
        Ok(())
    }
}

/// The warning that `kind`s are kept as a label only, if any pod has one but `linux`.
fn kinds_warning(pods: &BTreeMap<String, PodOut>) -> Option<String> {
    let kinds: std::collections::BTreeSet<&str> = pods
        .values()
        .filter_map(|p| p.labels.get(KIND_LABEL).map(String::as_str))
        // containerlab's `linux` kind is a plain container: nothing is lost.
        .filter(|kind| *kind != "linux")
        .collect();
    if kinds.is_empty() {
        return None;
    }
    let kinds: Vec<&str> = kinds.into_iter().collect();
    Some(format!("`kind` ({}) is kept as the container label {KIND_LABEL} only: a pod runs its image as a plain container, with none of a kind's own set-up", kinds.join(", ")))
}

/// The lab's links from the file's, each end as POD:IF with the interface's Linux name
/// (recorded in its pod's `interface_names` where the kind names it otherwise); and
/// the list of interfaces so renamed, "node:if is pod:linux".
fn links_out(
    text: &str,
    links: &[serde_yaml_ng::Value],
    pod_names: &BTreeMap<String, String>,
    node_kinds: &BTreeMap<String, String>,
    pods: &mut BTreeMap<String, PodOut>,
    not_carried: &mut NotCarried,
) -> Result<(Vec<LinkOut>, Vec<String>)> {
    let lines = links::lines(text);
    let mut lab_links = Vec::new();
    let mut mapped = Vec::new();
    for (index, value) in links.iter().enumerate() {
        let line = lines.get(index).copied().unwrap_or(0);
        let link = links::read(value, line)?;
        let mut ends = Vec::new();
        for (node, iface) in &link.ends {
            let Some(pod) = pod_names.get(node) else {
                bail!("line {line}: link endpoint {node}:{iface}: {node} is not a node of the topology");
            };
            let kind = node_kinds.get(node).map_or("linux", String::as_str);
            let named = aliases::linux_name(kind, iface)
                .map_err(|e| anyhow::anyhow!("line {line}: node {node} (kind {kind}): {e}"))?;
            let linux = match named {
                Some(linux) => {
                    mapped.push(format!("{node}:{iface} is {pod}:{linux}"));
                    if let Some(pod_out) = pods.get_mut(pod) {
                        pod_out.interface_names.insert(linux.clone(), iface.clone());
                    }
                    linux
                }
                None => iface.clone(),
            };
            xwire_model::topology::check_ifname(&linux).map_err(|e| {
                anyhow::anyhow!("line {line}: node {node} (kind {kind}): {e}, and the import knows no Linux name for it in kind {kind}")
            })?;
            ends.push(format!("{pod}:{linux}"));
        }
        for key in &link.not_carried {
            not_carried.add(format!("links: {key}"), format!("line {line}"));
        }
        let [a, b] = <[String; 2]>::try_from(ends).expect("a link has two ends");
        if link.ends[0].0 == link.ends[1].0 {
            let node = &link.ends[0].0;
            bail!("line {line}: a link from node {node} to itself ({a} to {b}): a lab wire joins two different pods");
        }
        lab_links.push(LinkOut {
            endpoints: [a, b],
            mtu: link.mtu,
        });
    }
    Ok((lab_links, mapped))
}

/// The warning listing the interfaces named the kind's way, the first few of them.
fn mapped_warning(mut mapped: Vec<String>) -> Option<String> {
    if mapped.is_empty() {
        return None;
    }
    const SHOWN: usize = 8;
    let more = mapped.len().saturating_sub(SHOWN);
    mapped.truncate(SHOWN);
    let more = if more > 0 {
        format!(", and {more} more")
    } else {
        String::new()
    };
    Some(format!(
        "interfaces named the kind's way are their Linux names, as containerlab maps them: {}{more}",
        mapped.join(", ")
    ))
}

/// The lab's name: `given` (`--name`), checked, or one derived from the file's `name`,
/// with a warning when it differs.
fn choose_name(file_name: &str, given: Option<&str>, warnings: &mut Vec<String>) -> Result<String> {
    if let Some(given) = given {
        super::file::check_lab_name(given).map_err(|e| anyhow::anyhow!("--name: {e}"))?;
        return Ok(given.to_owned());
    }
    let derived = lab_name(file_name);
    if derived != file_name {
        warnings.push(format!("the lab is named {derived:?} (the file's name {file_name:?} is not one a lab can have: lower-case letters, digits and '-', starting with a letter, at most {} long); --name names it otherwise", super::file::MAX_LAB_NAME));
    }
    Ok(derived)
}

/// The emulated nodes `node-1` .. `node-N`.
fn node_names(nodes: usize) -> Result<Vec<String>> {
    if nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    Ok((1..=nodes).map(|i| format!("node-{i}")).collect())
}

/// The lab file: a comment naming `file` and the warnings, then the lab, checked as
/// `lab up` checks it.
/// The lab file of `out`, headed by its warnings: first what the source held that the lab
/// cannot carry, then the importer's own. Checked by parsing it back.
fn finish(
    file: &Path,
    out: &LabOut,
    not_carried: NotCarried,
    own_warnings: Vec<String>,
) -> Result<Imported> {
    let mut warnings: Vec<String> = not_carried.warnings().collect();
    warnings.extend(own_warnings);
    let mut lab = format!(
        "# Imported from {} by `xwirectl lab import`.\n",
        file.display()
    );
    if !warnings.is_empty() {
        lab.push_str("# Warnings:\n");
        for warning in &warnings {
            lab.push_str(&format!("#   {warning}\n"));
        }
    }
    lab.push_str(&serde_yaml_ng::to_string(out).context("writing the lab file")?);
    super::file::parse(&lab, None)
        .map_err(|e| anyhow::anyhow!("the imported lab is not valid: {e}"))?;
    Ok(Imported { lab, warnings })
}

/// A containerlab name as a lab or pod name: lower case, with '-' for '_' and '.'.
fn converted(name: &str) -> String {
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

/// The lab name for containerlab name `name`: converted, and where that is not a lab
/// name (it starts with a digit, or is too long for the kernel names made from it),
/// made one: `lab-` before a digit, and a long name cut with its hash kept, so that two
/// long names that share a beginning stay two labs.
fn lab_name(name: &str) -> String {
    let mut lab: String = converted(name)
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    if !lab.starts_with(|c: char| c.is_ascii_lowercase()) {
        lab = format!("lab-{lab}");
    }
    let max = super::file::MAX_LAB_NAME;
    if lab.len() > max {
        let hash = format!("{:08x}", xwire_proto::fnv1a32(name.as_bytes()));
        lab = format!(
            "{}-{hash}",
            lab[..max - hash.len() - 1].trim_end_matches('-')
        );
    }
    lab
}

/// The pod name for node `name`, and whether it had to be made one: a node name that
/// starts with a digit (KNE's `8000e`) gets `n-` before it, as a pod name must start
/// with a letter.
fn pod_name(name: &str) -> Result<(String, bool)> {
    let mut pod = converted(name);
    let renamed = pod.starts_with(|c: char| c.is_ascii_digit());
    if renamed {
        pod = format!("n-{pod}");
    }
    let valid = pod.starts_with(|c: char| c.is_ascii_lowercase())
        && pod.len() <= 63
        && pod
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid {
        bail!("node name {name:?} cannot be a pod name (lower-case letters, digits and '-', at most 63)");
    }
    Ok((pod, renamed))
}

/// The warning for the nodes whose pods were given other names.
fn renamed_warning(renamed: &[(String, String)]) -> Option<String> {
    if renamed.is_empty() {
        return None;
    }
    let pairs: Vec<String> = renamed
        .iter()
        .map(|(node, pod)| format!("{node} is pod {pod}"))
        .collect();
    Some(format!(
        "a pod name starts with a letter: {}",
        pairs.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::super::file::{parse, Lab};
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

    fn imported(text: &str) -> (Lab, Vec<String>) {
        let imported = import_with_env(text, Path::new("/labs/clab.yml"), 2, None, |_| None)
            .unwrap_or_else(|e| panic!("{e:#}"));
        let lab = parse(&imported.lab, None).unwrap();
        (lab, imported.warnings)
    }

    #[test]
    fn nodes_links_kinds_and_defaults_map_and_the_rest_is_named() {
        let (lab, warnings) = imported(CLAB);
        assert_eq!(lab.name, "srl-frr");
        assert_eq!(lab.nodes, ["node-1", "node-2"]);
        // Round robin in the order of the nodes' names as written (upper case first).
        assert_eq!(lab.pods["r1"], "node-1");
        assert_eq!(lab.pods["client-1"], "node-2");
        assert_eq!(lab.pods["r2"], "node-1");
        let r1 = &lab.containers["r1"];
        assert_eq!(r1.image, "localhost/frr:9");
        assert_eq!(r1.env["SITE"], "lab");
        assert_eq!(r1.labels[KIND_LABEL], "linux");
        assert!(r1.binds[0].ends_with("conf/r1:/etc/frr"), "{:?}", r1.binds);
        assert_eq!(r1.exec, ["ip link set lo up"]);
        assert_eq!(
            lab.containers["r2"].cmd.as_deref().unwrap(),
            ["sh", "-c", "sleep 1000"]
        );
        assert_eq!(lab.containers["client-1"].image, "localhost/alpine");
        assert_eq!(lab.links[0].endpoints[0].to_string(), "r1:eth1");
        assert_eq!(lab.links[0].mtu, Some(9000));
        // One warning per field not carried, naming where it was set.
        let expected = [
            "`mgmt` is not carried into the lab (set in the file)",
            "`startup-config` is not carried into the lab (set in node r2)",
        ];
        assert_eq!(&warnings[..2], expected, "{warnings:#?}");
        assert!(
            warnings[2].starts_with("the lab is named \"srl-frr\""),
            "{warnings:#?}"
        );
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        let (_, warnings) =
            imported(&CLAB.replace("client_1: {kind: linux", "client_1: {kind: nokia_srlinux"));
        assert!(warnings[3].starts_with("`kind` (nokia_srlinux) is kept as the container label"));
    }

    #[test]
    fn a_group_gives_its_nodes_image_binds_and_exec() {
        // The case that lost everything: a node whose settings all come from its group.
        let clab = r#"
name: frrlab
topology:
  defaults: {kind: linux, exec: ["ip link set lo up"]}
  groups:
    routers:
      image: quay.io/frrouting/frr:9.1.0
      binds: ["__clabNodeName__/daemons:/etc/frr/daemons"]
      exec: ["touch /etc/frr/vtysh.conf"]
      labels: {role: router}
  nodes:
    frr01: {group: routers, exec: ["vtysh -b"]}
    frr02: {group: routers}
  links:
    - type: veth
      endpoints: [{node: frr01, interface: eth1}, {node: frr02, interface: eth1}]
"#;
        let (lab, _) = imported(clab);
        let frr01 = &lab.containers["frr01"];
        assert_eq!(frr01.image, "quay.io/frrouting/frr:9.1.0");
        assert_eq!(frr01.binds, ["/labs/frr01/daemons:/etc/frr/daemons"]);
        assert_eq!(
            frr01.exec,
            ["ip link set lo up", "touch /etc/frr/vtysh.conf", "vtysh -b"]
        );
        assert_eq!(frr01.labels["role"], "router");
        assert_eq!(
            lab.containers["frr02"].binds,
            ["/labs/frr02/daemons:/etc/frr/daemons"]
        );
        assert_eq!(lab.links[0].endpoints[1].to_string(), "frr02:eth1");
    }

    #[test]
    fn environment_variables_expand_before_the_file_is_read() {
        let clab = "name: ${LAB:=vars}\ntopology:\n  nodes:\n    r1: {kind: linux, image: \"${IMAGE}\", exec: [\"echo $HOME\"]}\n";
        let env = |var: &str| (var == "IMAGE").then(|| "localhost/frr:9".to_string());
        let imported = import_with_env(clab, Path::new("x.yml"), 1, None, env).unwrap();
        let lab = parse(&imported.lab, None).unwrap();
        assert_eq!(lab.name, "vars");
        assert_eq!(lab.containers["r1"].image, "localhost/frr:9");
        assert_eq!(lab.containers["r1"].exec, ["echo $HOME"]);
    }

    #[test]
    fn a_name_a_lab_cannot_have_is_made_one_and_said_and_name_overrides_it() {
        let (lab, warnings) = imported(&CLAB.replace("name: srl_frr", "name: 5-stage-clos"));
        assert_eq!(lab.name, "lab-5-stage-clos");
        assert!(
            warnings.iter().any(|w| w.contains("\"lab-5-stage-clos\"")),
            "{warnings:?}"
        );
        let long = CLAB.replace(
            "name: srl_frr",
            "name: a-very-long-lab-name-for-a-datacenter-fabric",
        );
        let (lab, _) = imported(&long);
        assert!(
            lab.name.len() <= super::super::file::MAX_LAB_NAME,
            "{}",
            lab.name
        );
        assert!(lab.name.starts_with("a-very-long-lab"), "{}", lab.name);
        let other = long.replace("fabric", "fabric-2");
        assert_ne!(imported(&other).0.name, lab.name);
        let named = import_with_env(CLAB, Path::new("x.yml"), 1, Some("mine"), |_| None).unwrap();
        assert_eq!(parse(&named.lab, None).unwrap().name, "mine");
        let e =
            import_with_env(CLAB, Path::new("x.yml"), 1, Some("No Good"), |_| None).unwrap_err();
        assert!(e.to_string().starts_with("--name:"), "{e}");
    }

    #[test]
    fn a_file_without_a_topology_or_a_name_is_an_error_not_an_empty_lab() {
        let e = import_with_env("name: x\n", Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        assert!(e.to_string().contains("no `topology:`"), "{e}");
        let e =
            import_with_env("topology: {}\n", Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        assert!(e.to_string().contains("--name"), "{e}");
    }

    #[test]
    fn what_a_lab_cannot_be_is_refused_with_its_line() {
        let host = CLAB.replace("\"client_1:eth1\"", "\"host:veth9\"");
        let e = import_with_env(&host, Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        assert!(e.to_string().starts_with("line 15: "), "{e}");
        assert!(e.to_string().contains("`host` link"), "{e}");
        let looped = CLAB.replace("\"client_1:eth1\"", "\"r2:eth3\"");
        let e = import_with_env(&looped, Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 15: a link from node r2 to itself"),
            "{e}"
        );
        let bridge = CLAB.replace("client_1: {kind: linux,", "client_1: {kind: bridge,");
        let e = import_with_env(&bridge, Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        assert!(e.to_string().contains("kind bridge"), "{e}");
    }

    #[test]
    fn a_kinds_interface_names_become_linux_names_and_one_linux_cannot_take_is_refused_at_its_line()
    {
        let clab = "name: srl\ntopology:\n  kinds:\n    nokia_srlinux: {image: srl:24}\n  nodes:\n    leaf1: {kind: nokia_srlinux}\n    leaf2: {kind: nokia_srlinux}\n  links:\n    - endpoints: [\"leaf1:ethernet-1/1\", \"leaf2:ethernet-1/49\"]\n";
        let (lab, warnings) = imported(clab);
        assert_eq!(lab.links[0].endpoints[0].to_string(), "leaf1:e1-1");
        assert_eq!(lab.links[0].endpoints[1].to_string(), "leaf2:e1-49");
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("leaf1:ethernet-1/1 is leaf1:e1-1")),
            "{warnings:#?}"
        );
        let linux = clab.replace("kind: nokia_srlinux}\n  links", "kind: linux}\n  links");
        let e = import_with_env(&linux, Path::new("x.yml"), 1, None, |_| None).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with(
                "line 9: node leaf2 (kind linux): \"ethernet-1/49\" is not a valid interface name"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_bind_of_the_hosts_system_directories_is_passed_through_with_a_warning() {
        let clab = CLAB.replace(
            "binds: [conf/r1:/etc/frr]",
            "binds: [\"/:/host\", \"/etc/../proc:/p:ro\", \"/etcetera:/x\"]",
        );
        let imported = import_with_env(&clab, Path::new("x.yml"), 1, None, |_| None).unwrap();
        let binds: Vec<&String> = imported
            .warnings
            .iter()
            .filter(|w| w.contains("binds the host's"))
            .collect();
        assert_eq!(binds.len(), 2, "{:?}", imported.warnings);
        assert!(imported.lab.contains("# Warnings:"), "{}", imported.lab);
        let lab = parse(&imported.lab, None).unwrap();
        // containerlab's order: sorted, one bind per container path.
        assert_eq!(
            lab.containers["r1"].binds,
            ["/:/host", "/etc/../proc:/p:ro", "/etcetera:/x"]
        );
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
