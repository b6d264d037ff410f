//! The lab file (docs/lab-file.md): nodes, pods on them, and links between pod interfaces.
//! Parsed with spans (marked-yaml) so that every refusal names the line and column it is
//! about; checking is pure and makes nothing. Reading the file, and turning a checked lab
//! into its Topology objects (which needs the nodes' underlay addresses), are the lab's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use marked_yaml::{Marker, Span, Spanned};
use serde::{Deserialize, Serialize};

pub mod mgmt;

use crate::impairment::Impairment;
use crate::topology::{self, Link, Metadata, RouteEntry, Topology, TopologySpec};
use mgmt::{room, Mgmt, DEFAULT_INTERFACE};

/// The label every lab container carries, with its lab's name (how `lab down` finds
/// them): the lab's own, so a file may not set it.
pub const LAB_LABEL: &str = "dev.xwire.lab";

/// The longest lab name: it goes into namespace names and paths.
pub const MAX_LAB_NAME: usize = 24;

/// The most nodes a lab has: each takes an address on the lab's /24 underlay.
pub const MAX_NODES: usize = 250;

/// The most pods a lab has. Each is a network namespace, a CNI ADD on its node and a
/// management address; a file that asks for many more is a mistake, and reading it whole
/// would only make `lab up` run for hours before it failed.
pub const MAX_PODS: usize = 20_000;

/// A checked lab.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lab {
    pub name: String,
    pub nodes: Vec<String>,
    /// Pod name to the node it runs on.
    pub pods: BTreeMap<String, String>,
    pub links: Vec<LabLink>,
    /// The pods that run as containers (with podman, in the pod's namespace), by pod.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub containers: BTreeMap<String, Container>,
    /// The pods' static routes and router mode, by pod (only pods that set either).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub routing: BTreeMap<String, PodRouting>,
    /// The management network; `None` with `mgmt: false`.
    #[serde(default)]
    pub mgmt: Option<Mgmt>,
    /// Node pools, by name; empty: every node on one underlay.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pools: BTreeMap<String, LabPool>,
    /// UMEM frames per fast-path port of every node's daemon; `None`: the daemon's
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames_per_port: Option<usize>,
    /// The names a pod's own software gives its interfaces (`ethernet-1/1`), by pod and
    /// Linux name (`e1-1`): shown beside the Linux names by `lab status`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub interface_names: BTreeMap<String, BTreeMap<String, String>>,
}

/// A pool of nodes with its own underlay, reached from the other pools only through
/// its gateways (docs/routing.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabPool {
    pub nodes: Vec<String>,
    /// In order of preference.
    pub gateways: Vec<String>,
    /// Behind NAT: its gateways dial out and are never dialed.
    #[serde(default)]
    pub nat: bool,
}

/// A pod's `routes:` and `policy_routing:` (the lab-wide `policy_routing:` folded in).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRouting {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_routing: Option<bool>,
}

/// When `lab up` pulls a pod's image: the values (and spellings) of containerlab's and
/// Kubernetes' `image-pull-policy`.
/// Ordered by what each asks of `lab up`: pods that share an image pull it by the
/// greatest of their policies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PullPolicy {
    /// Never pulled: the image must be in the local store.
    Never,
    /// Pulled when the local store does not have it.
    #[default]
    IfNotPresent,
    /// Pulled at every `lab up`, for the registry's newest.
    Always,
}

impl PullPolicy {
    fn is_default(&self) -> bool {
        *self == PullPolicy::default()
    }

    /// The policy `text` names, in any case (`IfNotPresent`, `ifnotpresent`, ...).
    pub fn parse(text: &str) -> Option<PullPolicy> {
        match text.to_ascii_lowercase().as_str() {
            "ifnotpresent" => Some(PullPolicy::IfNotPresent),
            "always" => Some(PullPolicy::Always),
            "never" => Some(PullPolicy::Never),
            _ => None,
        }
    }
}

/// What a pod with an `image:` runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    /// The image (pulled by `lab up` as `image_pull_policy` says).
    pub image: String,
    /// The command, instead of the image's own (`None`: the image's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The container's labels (an imported containerlab node's kind is one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// When `lab up` pulls the image.
    #[serde(default, skip_serializing_if = "PullPolicy::is_default")]
    pub image_pull_policy: PullPolicy,
    /// `HOST:CONTAINER[:OPTIONS]` mounts; a relative host path is relative to the lab
    /// file's directory (made absolute by `lab up`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binds: Vec<String>,
    /// Commands run in the container (with `sh -c`), in order, once its wires are up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec: Vec<String>,
    /// The command (run with `sh -c`) that makes the container's running configuration
    /// its startup one, for `lab save`; `None`: the image has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabLink {
    pub uid: u64,
    pub endpoints: [Endpoint; 2],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ips: Option<[String; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
    /// The impairment of each direction: `[0]` is what the first endpoint sends (A to
    /// B), `[1]` what the second sends.
    #[serde(default, skip_serializing_if = "no_impairment")]
    pub impair: [Option<Impairment>; 2],
}

fn no_impairment(impair: &[Option<Impairment>; 2]) -> bool {
    impair.iter().all(Option::is_none)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Endpoint {
    pub pod: String,
    pub ifname: String,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.pod, self.ifname)
    }
}

/// Why a lab file was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabFileError {
    /// 1-based; 0 when the error has no place in the file.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for LabFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(
                f,
                "line {}, column {}: {}",
                self.line, self.column, self.message
            )
        }
    }
}

impl std::error::Error for LabFileError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLab {
    name: Spanned<String>,
    nodes: Vec<Spanned<String>>,
    #[serde(default)]
    pods: HashMap<Spanned<String>, Spanned<RawPod>>,
    #[serde(default)]
    links: Vec<Spanned<RawLink>>,
    /// Router mode for every pod that does not say.
    policy_routing: Option<bool>,
    mgmt: Option<RawMgmt>,
    #[serde(default)]
    pools: HashMap<Spanned<String>, Spanned<RawPool>>,
    frames_per_port: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    nodes: Vec<Spanned<String>>,
    gateways: Vec<Spanned<String>>,
    nat: Option<bool>,
}

/// `mgmt: false`, `mgmt: true` or `mgmt: {interface, ipv4_subnet, ipv6_subnet}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawMgmt {
    On(bool),
    // A scalar reaches an untagged enum as a string.
    Word(String),
    Settings(RawMgmtSettings),
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawMgmtSettings {
    interface: Option<String>,
    ipv4_subnet: Option<String>,
    ipv6_subnet: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPod {
    node: Spanned<String>,
    image: Option<Spanned<String>>,
    cmd: Option<Spanned<RawCommand>>,
    env: Option<Spanned<BTreeMap<String, String>>>,
    labels: Option<Spanned<BTreeMap<String, String>>>,
    image_pull_policy: Option<Spanned<String>>,
    binds: Option<Spanned<Vec<Spanned<String>>>>,
    exec: Option<Spanned<Vec<String>>>,
    save: Option<Spanned<String>>,
    interface_names: Option<Spanned<BTreeMap<String, String>>>,
    routes: Option<Vec<Spanned<RawRoute>>>,
    policy_routing: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    dst: String,
    via: String,
}

/// A command: a list of words, or one string split into words as a shell would.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawCommand {
    Words(Vec<String>),
    Line(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    endpoints: Spanned<Vec<Spanned<String>>>,
    uid: Option<Spanned<u64>>,
    ips: Option<Spanned<Vec<Spanned<String>>>>,
    mtu: Option<Spanned<u32>>,
    carrier: Option<Spanned<String>>,
    /// Both directions' impairment; `impair_a_to_b` and `impair_b_to_a` replace it for one.
    impair: Option<Spanned<Impairment>>,
    impair_a_to_b: Option<Spanned<Impairment>>,
    impair_b_to_a: Option<Spanned<Impairment>>,
}

fn at(span: &Span, message: impl Into<String>) -> LabFileError {
    let (line, column) = span
        .start()
        .map(|m: &Marker| (m.line(), m.column()))
        .unwrap_or((0, 0));
    LabFileError {
        line,
        column,
        message: message.into(),
    }
}

/// Parses and checks a lab file. `previous`, the lab as it runs now (for `lab edit`),
/// keeps the uids it assigned to links that have none in the file, so an unchanged link
/// keeps its wire.
pub fn parse(text: &str, previous: Option<&Lab>) -> Result<Lab, LabFileError> {
    let options = marked_yaml::LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    let mut root = marked_yaml::parse_yaml_with_options(0, text, options)
        .map_err(|e| yaml_error(&e.into(), text))?;
    drop_nulls(&mut root);
    let raw: RawLab = marked_yaml::from_node(&root).map_err(|e| yaml_error(&e.into(), text))?;
    check_name(&raw.name, "lab name", MAX_LAB_NAME)?;
    let nodes = check_nodes(&raw)?;
    let PodsChecked {
        pods,
        containers,
        routing,
        interface_names,
    } = check_pods(&raw, &nodes)?;
    let links = check_links(&raw.links, &pods, previous)?;
    let mgmt = check_mgmt(raw.mgmt.as_ref(), &pods, &links, previous)?;
    let pools = check_pools(&raw.name, &raw.pools, &nodes)?;
    if let Some(frames) = &raw.frames_per_port {
        if !FRAMES_PER_PORT.contains(&**frames) {
            return Err(at(
                frames.span(),
                format!(
                    "frames_per_port: {} is not between {} and {}",
                    **frames,
                    FRAMES_PER_PORT.start(),
                    FRAMES_PER_PORT.end()
                ),
            ));
        }
    }
    let lab = Lab {
        name: raw.name.to_string(),
        nodes,
        pods,
        links,
        containers,
        routing,
        mgmt,
        pools,
        frames_per_port: raw.frames_per_port.as_ref().map(|f| **f),
        interface_names,
    };
    // What the daemons will be given must pass their own checks too.
    for t in topologies(&lab) {
        topology::check(&t).map_err(|message| LabFileError {
            line: 0,
            column: 0,
            message: format!("pod {}: {message}", t.metadata.name),
        })?;
    }
    Ok(lab)
}

/// The lab's nodes, each named once, one at least and `MAX_NODES` at most.
fn check_nodes(raw: &RawLab) -> Result<Vec<String>, LabFileError> {
    let mut nodes: Vec<String> = Vec::new();
    for node in &raw.nodes {
        check_name(node, "node name", 63)?;
        if nodes.iter().any(|n| n == node.as_str()) {
            return Err(at(
                node.span(),
                format!("node {} is listed twice", node.as_str()),
            ));
        }
        nodes.push(node.to_string());
    }
    if nodes.is_empty() {
        return Err(at(raw.name.span(), "a lab needs at least one node"));
    }
    if nodes.len() > MAX_NODES {
        let message = format!("{} nodes; a lab has at most {MAX_NODES}", nodes.len());
        return Err(at(raw.nodes[MAX_NODES].span(), message));
    }
    Ok(nodes)
}

/// What the pods of a lab file say, checked: see `Lab`'s fields of the same names.
struct PodsChecked {
    pods: BTreeMap<String, String>,
    containers: BTreeMap<String, Container>,
    routing: BTreeMap<String, PodRouting>,
    interface_names: BTreeMap<String, BTreeMap<String, String>>,
}

/// The pods, each on a node of `nodes`, with their containers, routing and interface
/// names.
fn check_pods(raw: &RawLab, nodes: &[String]) -> Result<PodsChecked, LabFileError> {
    if let Some((name, _)) = raw.pods.iter().nth(MAX_PODS) {
        let message = format!("{} pods; a lab has at most {MAX_PODS}", raw.pods.len());
        return Err(at(name.span(), message));
    }
    let mut checked = PodsChecked {
        pods: BTreeMap::new(),
        containers: BTreeMap::new(),
        routing: BTreeMap::new(),
        interface_names: BTreeMap::new(),
    };
    for (name, pod) in &raw.pods {
        check_name(name, "pod name", 63)?;
        if !nodes.iter().any(|n| n == pod.node.as_str()) {
            let message = format!(
                "pod {} is on node {}, which is not in `nodes`",
                name.as_str(),
                pod.node.as_str()
            );
            return Err(at(pod.node.span(), message));
        }
        checked.pods.insert(name.to_string(), pod.node.to_string());
        if let Some(container) = check_container(name, pod)? {
            checked.containers.insert(name.to_string(), container);
        }
        let routing = pod_routing(name, pod, raw.policy_routing)?;
        if routing != PodRouting::default() {
            checked.routing.insert(name.to_string(), routing);
        }
        if let Some(names) = &pod.interface_names {
            if let Some(bad) = names.keys().find(|k| topology::check_ifname(k).is_err()) {
                let message = format!(
                    "pod {}: interface_names: {bad:?} is not a Linux interface name",
                    name.as_str()
                );
                return Err(at(names.span(), message));
            }
            if !names.is_empty() {
                checked
                    .interface_names
                    .insert(name.to_string(), (**names).clone());
            }
        }
    }
    Ok(checked)
}

/// A pod's static routes and router mode (`policy_routing`: the lab's, where the pod
/// does not say).
fn pod_routing(
    name: &Spanned<String>,
    pod: &RawPod,
    policy_routing: Option<bool>,
) -> Result<PodRouting, LabFileError> {
    let mut routing = PodRouting {
        routes: Vec::new(),
        policy_routing: pod.policy_routing.or(policy_routing),
    };
    for route in pod.routes.iter().flatten() {
        let entry = RouteEntry {
            dst: route.dst.clone(),
            via: route.via.clone(),
        };
        entry
            .parse()
            .map_err(|e| at(route.span(), format!("pod {}: route: {e}", name.as_str())))?;
        routing.routes.push(entry);
    }
    Ok(routing)
}

/// The most pools a lab has: each takes a /24 of 172.31.0.0/16 for its underlay.
pub const MAX_POOLS: usize = 200;

/// The pools the file asks for: every node in exactly one, each with gateways among its
/// own nodes, at most one behind NAT.
/// What `frames_per_port` may be: what the daemon accepts.
const FRAMES_PER_PORT: std::ops::RangeInclusive<usize> = 2..=1 << 20;

fn check_pools(
    lab_name: &Spanned<String>,
    raw: &HashMap<Spanned<String>, Spanned<RawPool>>,
    nodes: &[String],
) -> Result<BTreeMap<String, LabPool>, LabFileError> {
    if raw.is_empty() {
        return Ok(BTreeMap::new());
    }
    if raw.len() > MAX_POOLS {
        return Err(at(
            lab_name.span(),
            format!("{} pools; a lab has at most {MAX_POOLS}", raw.len()),
        ));
    }
    let mut pools = BTreeMap::new();
    let mut pool_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, pool) in raw {
        check_name(name, "pool name", 63)?;
        if pool.nodes.is_empty() {
            return Err(at(
                name.span(),
                format!("pool {} has no nodes", name.as_str()),
            ));
        }
        for node in &pool.nodes {
            if !nodes.iter().any(|n| n == node.as_str()) {
                let message = format!(
                    "pool {}: node {} is not in `nodes`",
                    name.as_str(),
                    node.as_str()
                );
                return Err(at(node.span(), message));
            }
            if let Some(other) = pool_of.insert(node.as_str(), name.as_str()) {
                let message = format!(
                    "node {} is in pool {other} and pool {}",
                    node.as_str(),
                    name.as_str()
                );
                return Err(at(node.span(), message));
            }
        }
        if pool.gateways.is_empty() {
            return Err(at(
                name.span(),
                format!("pool {} has no gateway", name.as_str()),
            ));
        }
        let mut gateways: Vec<String> = Vec::new();
        for gateway in &pool.gateways {
            if !pool.nodes.iter().any(|n| n.as_str() == gateway.as_str()) {
                let message = format!(
                    "pool {}: gateway {} is not one of the pool's nodes",
                    name.as_str(),
                    gateway.as_str()
                );
                return Err(at(gateway.span(), message));
            }
            if gateways.iter().any(|g| g == gateway.as_str()) {
                return Err(at(
                    gateway.span(),
                    format!("gateway {} is listed twice", gateway.as_str()),
                ));
            }
            gateways.push(gateway.to_string());
        }
        pools.insert(
            name.to_string(),
            LabPool {
                nodes: pool.nodes.iter().map(|n| n.to_string()).collect(),
                gateways,
                nat: pool.nat.unwrap_or(false),
            },
        );
    }
    if let Some(node) = nodes.iter().find(|n| !pool_of.contains_key(n.as_str())) {
        return Err(at(
            lab_name.span(),
            format!("node {node} is in no pool (with pools, every node is in one)"),
        ));
    }
    if pools.values().filter(|p| p.nat).count() > 1 {
        return Err(at(
            lab_name.span(),
            "more than one pool is behind NAT: their gateways could not reach each other",
        ));
    }
    Ok(pools)
}

/// The management network the file asks for (on unless `mgmt: false`), with each pod's
/// host number; a running lab's (`previous`) subnets and numbers are kept.
fn check_mgmt(
    raw: Option<&RawMgmt>,
    pods: &BTreeMap<String, String>,
    links: &[LabLink],
    previous: Option<&Lab>,
) -> Result<Option<Mgmt>, LabFileError> {
    let refuse = |message: String| LabFileError {
        line: 0,
        column: 0,
        message: format!("mgmt: {message}"),
    };
    // `false` turns it off; absent, `true` or a mapping turns it on (with defaults for
    // what the mapping leaves out).
    let on = |flag: bool| flag.then(RawMgmtSettings::default);
    let settings = match raw {
        None => on(true),
        Some(RawMgmt::On(flag)) => on(*flag),
        Some(RawMgmt::Word(word)) => match word.as_str() {
            "true" => on(true),
            "false" => on(false),
            other => {
                return Err(refuse(format!(
                    "{other:?}: expected true, false or {{interface, ipv4_subnet, ipv6_subnet}}"
                )))
            }
        },
        Some(RawMgmt::Settings(settings)) => Some(settings.clone()),
    };
    let Some(settings) = settings else {
        return Ok(None);
    };
    let interface = settings
        .interface
        .unwrap_or_else(|| DEFAULT_INTERFACE.to_owned());
    topology::check_ifname(&interface).map_err(|e| refuse(format!("interface: {e}")))?;
    if let Some(end) = links
        .iter()
        .flat_map(|l| l.endpoints.iter())
        .find(|end| end.ifname == interface)
    {
        return Err(refuse(format!(
            "{end} is the management interface's name: rename the link's interface or set mgmt.interface"
        )));
    }
    for (field, given, v4) in [
        ("ipv4_subnet", &settings.ipv4_subnet, true),
        ("ipv6_subnet", &settings.ipv6_subnet, false),
    ] {
        let Some(given) = given else { continue };
        let subnet = topology::parse_cidr(given).map_err(|e| refuse(format!("{field}: {e}")))?;
        if subnet.0.is_ipv4() != v4 {
            return Err(refuse(format!(
                "{field}: {given} is of the other address family"
            )));
        }
        if crate::route::network(subnet.0, subnet.1) != subnet {
            return Err(refuse(format!("{field}: {given} has host bits set")));
        }
        if room(subnet) < pods.len() as u64 {
            return Err(refuse(format!(
                "{field}: {given} has room for {} pods, the lab has {}",
                room(subnet),
                pods.len()
            )));
        }
    }
    let before = previous.and_then(|p| p.mgmt.as_ref());
    let mut mgmt = Mgmt {
        interface,
        ipv4_subnet: settings
            .ipv4_subnet
            .or_else(|| before.and_then(|b| b.ipv4_subnet.clone())),
        ipv6_subnet: settings
            .ipv6_subnet
            .or_else(|| before.and_then(|b| b.ipv6_subnet.clone())),
        hosts: BTreeMap::new(),
    };
    mgmt.assign(pods.keys().cloned(), before);
    Ok(Some(mgmt))
}

/// The container of pod `name`, when it names an image; the container fields without
/// an image are refused.
fn check_container(
    name: &Spanned<String>,
    pod: &RawPod,
) -> Result<Option<Container>, LabFileError> {
    let Some(image) = &pod.image else {
        let stray = [
            pod.cmd.as_ref().map(|c| c.span()),
            pod.env.as_ref().map(|e| e.span()),
            pod.labels.as_ref().map(|l| l.span()),
            pod.image_pull_policy.as_ref().map(|p| p.span()),
            pod.binds.as_ref().map(|b| b.span()),
            pod.exec.as_ref().map(|e| e.span()),
            pod.save.as_ref().map(|s| s.span()),
        ];
        if let Some(span) = stray.into_iter().flatten().next() {
            let message = format!(
                "pod {} has no `image`: cmd, env, labels, image_pull_policy, binds, exec and save are for a pod that runs a container",
                name.as_str()
            );
            return Err(at(span, message));
        }
        return Ok(None);
    };
    if image.trim().is_empty() || image.contains(char::is_whitespace) {
        return Err(at(
            image.span(),
            "`image` must name an image, e.g. localhost/xwire-busybox:latest",
        ));
    }
    let cmd = container_cmd(pod)?;
    let env = pod.env.as_ref().map(|e| (**e).clone()).unwrap_or_default();
    if let Some(bad) = env.keys().find(|k| k.is_empty() || k.contains('=')) {
        let span = pod.env.as_ref().map(|e| e.span()).expect("env is there");
        return Err(at(
            span,
            format!("environment variable name {bad:?} is not valid"),
        ));
    }
    let labels = container_labels(pod)?;
    let image_pull_policy = match &pod.image_pull_policy {
        None => PullPolicy::default(),
        Some(text) => PullPolicy::parse(text).ok_or_else(|| {
            at(
                text.span(),
                format!(
                    "image_pull_policy {:?} is not IfNotPresent, Always or Never",
                    text.as_str()
                ),
            )
        })?,
    };
    let binds = container_binds(pod)?;
    Ok(Some(Container {
        image: image.to_string(),
        cmd,
        env,
        labels,
        image_pull_policy,
        binds,
        exec: pod.exec.as_ref().map(|e| (**e).clone()).unwrap_or_default(),
        save: match &pod.save {
            Some(line) if line.trim().is_empty() => return Err(at(line.span(), "`save` is empty")),
            save => save.as_ref().map(|line| line.to_string()),
        },
    }))
}

/// A container's `cmd`: a list of words, or a line split as a shell would.
fn container_cmd(pod: &RawPod) -> Result<Option<Vec<String>>, LabFileError> {
    Ok(match pod.cmd.as_ref().map(|c| (c.span(), &**c)) {
        None => None,
        Some((span, RawCommand::Words(words))) if words.is_empty() => {
            return Err(at(span, "`cmd` is empty"))
        }
        Some((_, RawCommand::Words(words))) => Some(words.clone()),
        Some((span, RawCommand::Line(line))) => {
            let words =
                shell_words::split(line).map_err(|e| at(span, format!("`cmd` {line:?}: {e}")))?;
            if words.is_empty() {
                return Err(at(span, "`cmd` is empty"));
            }
            Some(words)
        }
    })
}

/// A container's labels, none of them empty, with `=`, or xwire's own.
fn container_labels(pod: &RawPod) -> Result<BTreeMap<String, String>, LabFileError> {
    let labels = pod
        .labels
        .as_ref()
        .map(|l| (**l).clone())
        .unwrap_or_default();
    if let Some(bad) = labels
        .keys()
        .find(|k| k.is_empty() || k.contains('=') || *k == LAB_LABEL)
    {
        let span = pod
            .labels
            .as_ref()
            .map(|l| l.span())
            .expect("labels are there");
        return Err(at(
            span,
            format!(
                "label name {bad:?} is not valid (or is the one xwire marks its containers with)"
            ),
        ));
    }
    Ok(labels)
}

/// A container's binds, each HOST:CONTAINER[:OPTIONS] with an absolute CONTAINER path.
fn container_binds(pod: &RawPod) -> Result<Vec<String>, LabFileError> {
    let mut binds = Vec::new();
    for bind in pod.binds.iter().flat_map(|b| b.iter()) {
        let parts: Vec<&str> = bind.split(':').collect();
        let well_formed =
            matches!(parts.len(), 2 | 3) && !parts[0].is_empty() && parts[1].starts_with('/');
        if !well_formed {
            return Err(at(
                bind.span(),
                format!(
                    "bind {:?} is not HOST:CONTAINER[:OPTIONS] with an absolute CONTAINER path",
                    bind.as_str()
                ),
            ));
        }
        binds.push(bind.to_string());
    }
    Ok(binds)
}

/// A link's `ips`, one address per end, each checked as a CIDR.
fn link_ips(link: &RawLink) -> Result<Option<[String; 2]>, LabFileError> {
    let Some(ips) = &link.ips else {
        return Ok(None);
    };
    let [ip_a, ip_b] = ips.as_slice() else {
        return Err(at(
            ips.span(),
            "ips has one address per endpoint, as [a/len, b/len]",
        ));
    };
    for ip in [ip_a, ip_b] {
        topology::parse_cidr(ip).map_err(|e| at(ip.span(), e))?;
    }
    Ok(Some([ip_a.to_string(), ip_b.to_string()]))
}

/// A link's impairment of each direction (a→b, b→a), checked: the direction's own, or
/// the link's `impair` for both.
fn link_impairments(link: &RawLink) -> Result<[Option<Impairment>; 2], LabFileError> {
    let mut impair = [None, None];
    for (direction, own) in [&link.impair_a_to_b, &link.impair_b_to_a]
        .into_iter()
        .enumerate()
    {
        let Some(given) = own.as_ref().or(link.impair.as_ref()) else {
            continue;
        };
        given.spec().map_err(|e| at(given.span(), e))?;
        impair[direction] = Some((**given).clone());
    }
    Ok(impair)
}

fn check_links(
    raw: &[Spanned<RawLink>],
    pods: &BTreeMap<String, String>,
    previous: Option<&Lab>,
) -> Result<Vec<LabLink>, LabFileError> {
    let mut used_ends: BTreeSet<Endpoint> = BTreeSet::new();
    let mut uids: BTreeSet<u64> = raw
        .iter()
        .filter_map(|l| l.uid.as_ref().map(|u| **u))
        .collect();
    let mut seen_uids = BTreeSet::new();
    // Uids are only ever added, so the lowest free one never goes down: a search from 0
    // for each link without one was quadratic in the links.
    let mut lowest_free = 0;
    // The uids the lab had, by its links' ends (for `lab edit`), so that an unchanged
    // link keeps its uid.
    let kept_uids: HashMap<[&Endpoint; 2], u64> = previous
        .iter()
        .flat_map(|p| &p.links)
        .map(|l| ([&l.endpoints[0], &l.endpoints[1]], l.uid))
        .collect();
    let mut links = Vec::new();
    for link in raw {
        let [a, b] = link.endpoints.as_slice() else {
            return Err(at(
                link.endpoints.span(),
                "a link has exactly two endpoints, as [pod:interface, pod:interface]",
            ));
        };
        let endpoints = [endpoint(a, pods)?, endpoint(b, pods)?];
        if endpoints[0].pod == endpoints[1].pod {
            return Err(at(b.span(), "a link joins two different pods"));
        }
        for (end, spanned) in endpoints.iter().zip([a, b]) {
            if !used_ends.insert(end.clone()) {
                return Err(at(
                    spanned.span(),
                    format!("interface {end} is used by another link"),
                ));
            }
        }
        if let Some(uid) = &link.uid {
            if !seen_uids.insert(**uid) {
                return Err(at(
                    uid.span(),
                    format!("uid {} is used by another link", **uid),
                ));
            }
        }
        let ips = link_ips(link)?;
        if let Some(mtu) = &link.mtu {
            if !(68..=xwire_proto::data::MAX_LINK_MTU).contains(&**mtu) {
                return Err(at(
                    mtu.span(),
                    format!(
                        "mtu {} is outside 68..={}",
                        **mtu,
                        xwire_proto::data::MAX_LINK_MTU
                    ),
                ));
            }
        }
        if let Some(carrier) = &link.carrier {
            crate::config::carrier_name::parse(carrier).map_err(|e| at(carrier.span(), e))?;
        }
        let impair = link_impairments(link)?;
        let uid = match &link.uid {
            Some(uid) => **uid,
            None => {
                let kept = kept_uids
                    .get(&[&endpoints[0], &endpoints[1]])
                    .or_else(|| kept_uids.get(&[&endpoints[1], &endpoints[0]]));
                let uid = match kept {
                    Some(&uid) if !uids.contains(&uid) => uid,
                    _ => {
                        while uids.contains(&lowest_free) {
                            lowest_free += 1;
                        }
                        lowest_free
                    }
                };
                uids.insert(uid);
                uid
            }
        };
        links.push(LabLink {
            uid,
            endpoints,
            ips,
            mtu: link.mtu.as_ref().map(|m| **m),
            carrier: link.carrier.as_ref().map(|c| c.to_string()),
            impair,
        });
    }
    Ok(links)
}

fn endpoint(
    text: &Spanned<String>,
    pods: &BTreeMap<String, String>,
) -> Result<Endpoint, LabFileError> {
    let Some((pod, ifname)) = text.split_once(':') else {
        return Err(at(
            text.span(),
            format!("endpoint {:?} is not pod:interface", text.as_str()),
        ));
    };
    if !pods.contains_key(pod) {
        return Err(at(text.span(), format!("pod {pod} is not in `pods`")));
    }
    topology::check_ifname(ifname).map_err(|e| at(text.span(), e))?;
    Ok(Endpoint {
        pod: pod.into(),
        ifname: ifname.into(),
    })
}

/// Lower-case letters, digits and '-', starting with a letter: names that fit namespace
/// names, certificate names and Kubernetes names alike.
fn check_name(name: &Spanned<String>, what: &str, max: usize) -> Result<(), LabFileError> {
    name_rule(name, what, max).map_err(|message| at(name.span(), message))
}

/// The rule for a lab's name, for every command that takes one (the file's own name is
/// checked by the same rule when it is parsed).
pub fn check_lab_name(name: &str) -> Result<(), String> {
    name_rule(name, "lab name", MAX_LAB_NAME)
}

fn name_rule(name: &str, what: &str, max: usize) -> Result<(), String> {
    let ok = name.len() <= max
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {name:?} must be lower-case letters, digits and '-', start with a letter, and be at most {max} long"))
    }
}

/// YAML's null (a plain `~` or `null`) means the key was not written. marked-yaml reads
/// every scalar as text (`exec: ~` would be the string "~") and has no null for an
/// `Option` either, so each key whose value is null is taken out before the file is read;
/// a null list item becomes an empty scalar. A quoted "~" stays text.
fn drop_nulls(node: &mut marked_yaml::Node) {
    let is_null = |node: &marked_yaml::Node| {
        node.as_scalar()
            .is_some_and(|s| s.may_coerce() && matches!(s.as_str(), "~" | "null" | "Null" | "NULL"))
    };
    match node {
        marked_yaml::Node::Scalar(_) => {}
        marked_yaml::Node::Mapping(mapping) => {
            mapping.retain(|_, value| !is_null(value));
            mapping.values_mut().for_each(drop_nulls);
        }
        marked_yaml::Node::Sequence(items) => {
            for item in items.iter_mut() {
                if is_null(item) {
                    *item = marked_yaml::Node::Scalar(
                        marked_yaml::types::MarkedScalarNode::new_empty(*item.span()),
                    );
                }
                drop_nulls(item);
            }
        }
    }
}

fn yaml_error(e: &marked_yaml::FromYamlError, text: &str) -> LabFileError {
    use marked_yaml::LoadError;
    let marker = match e {
        marked_yaml::FromYamlError::ParseYaml(load) => match load {
            LoadError::TopLevelMustBeMapping(m)
            | LoadError::TopLevelMustBeSequence(m)
            | LoadError::UnexpectedAnchor(m)
            | LoadError::MappingKeyMustBeScalar(m)
            | LoadError::UnexpectedTag(m)
            | LoadError::ScanError(m, _) => Some(*m),
            LoadError::DuplicateKey(keys) => keys.key.span().start().copied(),
        },
        marked_yaml::FromYamlError::FromNode(node) => match &**node {
            // marked-yaml places an unknown field at the mapping that holds it when that
            // mapping is itself a `Spanned` value; the key is the better place.
            marked_yaml::Error::UnknownFieldError(field, _, _) => {
                let from = node.start_mark();
                key_after(text, field, from).or(from)
            }
            _ => node.start_mark(),
        },
    };
    let mut message = e.to_string();
    let (line, column) = match marker {
        Some(m) => {
            // The loader's messages start with the place; it is said once, in front.
            if let Some(rest) = message.strip_prefix(&format!("{m}: ")) {
                message = rest.to_owned();
            }
            (m.line(), m.column())
        }
        None => (0, 0),
    };
    LabFileError {
        line,
        column,
        message,
    }
}

/// Where `key:` first appears as a mapping key at or after `from`.
fn key_after(text: &str, key: &str, from: Option<Marker>) -> Option<Marker> {
    let first_line = from.map_or(1, |m| m.line());
    text.lines()
        .enumerate()
        .skip(first_line - 1)
        .find_map(|(i, line)| {
            line.match_indices(key).find_map(|(at, _)| {
                let before = line[..at].trim_end().chars().last();
                let after = line[at + key.len()..].trim_start();
                let is_key =
                    matches!(before, None | Some('{' | ',' | '-')) && after.starts_with(':');
                is_key.then(|| Marker::new(0, 0, i + 1, line[..at].chars().count() + 1))
            })
        })
}

/// The Topology objects of a lab: one per pod, in the namespace named after the lab, with
/// no status (where each pod runs is the lab's to say: its nodes' underlay addresses).
pub fn topologies(lab: &Lab) -> Vec<Topology> {
    // Each pod's link ends, in the file's order, found in one pass over the links: a
    // pass per pod made parsing a 10,000-pod lab take 6 s.
    let mut ends: BTreeMap<&str, Vec<Link>> = BTreeMap::new();
    for link in &lab.links {
        for (me, peer) in [(0, 1), (1, 0)] {
            let (local, remote) = (&link.endpoints[me], &link.endpoints[peer]);
            let ip = |i: usize| link.ips.as_ref().map(|ips| ips[i].clone());
            ends.entry(local.pod.as_str()).or_default().push(Link {
                uid: link.uid,
                peer_pod: remote.pod.clone(),
                local_intf: local.ifname.clone(),
                peer_intf: remote.ifname.clone(),
                local_ip: ip(me),
                peer_ip: ip(peer),
                mtu: link.mtu,
                local_mac: None,
                peer_mac: None,
                carrier: link.carrier.clone(),
                impairment: link.impair[me].clone(),
            });
        }
    }
    lab.pods
        .keys()
        .map(|pod| {
            let links = ends.remove(pod.as_str()).unwrap_or_default();
            Topology {
                api_version: topology::API_VERSION.into(),
                kind: topology::KIND.into(),
                metadata: Metadata {
                    name: pod.clone(),
                    namespace: lab.name.clone(),
                    other: BTreeMap::new(),
                },
                spec: {
                    let routing = lab.routing.get(pod).cloned().unwrap_or_default();
                    TopologySpec {
                        links,
                        routes: routing.routes,
                        policy_routing: routing.policy_routing,
                    }
                },
                status: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
