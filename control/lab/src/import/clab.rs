//! A containerlab topology file as containerlab reads it, and a node's settings resolved
//! through its four levels the way containerlab resolves them (its manual's "nodes" page
//! and `types/topology.go`): `defaults`, then the node's kind under `kinds`, then its
//! group under `groups`, then the node itself, the more specific level winning.
//!
//! Per field, as containerlab does it:
//! - one value (image, cmd, startup-config, image-pull-policy, and every other scalar):
//!   the most specific level that sets it;
//! - `ports`: the most specific level's list, whole (containerlab does not merge it);
//! - `env`, `labels`: merged key by key, the more specific level's value winning;
//! - `exec`: every level's list, least specific first, repeats dropped;
//! - `binds`: the same, then one bind per container path, the more specific level's;
//!   sorted, as containerlab hands them to the runtime.
//!
//! A node's kind is its own, else its group's, else the defaults' group's, else the
//! defaults'; its group is its own, else its kind's, else the defaults'.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_yaml_ng::Value;

#[derive(Deserialize)]
pub(super) struct Clab {
    pub(super) name: Option<String>,
    pub(super) topology: Option<Topology>,
    #[serde(flatten)]
    pub(super) other: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
pub(super) struct Topology {
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) defaults: NodeDef,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) kinds: BTreeMap<String, NodeDef>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) groups: BTreeMap<String, NodeDef>,
    /// A node written with no settings (`r1:` or `r1: {}`) is a node all the same.
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) nodes: BTreeMap<String, Option<NodeDef>>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) links: Vec<Value>,
    #[serde(flatten)]
    pub(super) other: BTreeMap<String, Value>,
}

/// One level's settings: a node's own, its group's, its kind's or the defaults.
#[derive(Deserialize, Default, Clone, Debug)]
#[serde(rename_all = "kebab-case")]
pub(super) struct NodeDef {
    pub(super) kind: Option<String>,
    pub(super) group: Option<String>,
    pub(super) image: Option<String>,
    pub(super) cmd: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) env: BTreeMap<String, Scalar>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) labels: BTreeMap<String, Scalar>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) binds: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) exec: Vec<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub(super) ports: Vec<String>,
    pub(super) startup_config: Option<String>,
    pub(super) image_pull_policy: Option<String>,
    /// Everything else this level sets, by key: named as not carried.
    #[serde(flatten)]
    pub(super) other: BTreeMap<String, Value>,
}

/// The keys of `other` that carry a value: `key: ~` sets nothing, so is not "not carried".
pub(super) fn set_keys(other: &BTreeMap<String, Value>) -> impl Iterator<Item = &str> {
    other
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, _)| k.as_str())
}

/// A list or map written as YAML's null (`binds: ~`) is an empty one, as containerlab
/// (Go's YAML decoder) reads it.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// An environment or label value: containerlab's schema takes a string, a number or a
/// boolean, and the container gets its text; a null is the empty text (Go's zero
/// string), not "~".
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub(super) enum Scalar {
    Text(String),
    Number(serde_yaml_ng::Number),
    Bool(bool),
    Null,
}

impl Scalar {
    pub(super) fn text(&self) -> String {
        match self {
            Scalar::Text(t) => t.clone(),
            Scalar::Number(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
            Scalar::Null => String::new(),
        }
    }
}

/// A node's settings after inheritance.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Resolved {
    pub(super) kind: Option<String>,
    pub(super) group: Option<String>,
    pub(super) image: Option<String>,
    pub(super) cmd: Option<String>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) binds: Vec<String>,
    pub(super) exec: Vec<String>,
    pub(super) ports: Vec<String>,
    pub(super) startup_config: Option<String>,
    pub(super) image_pull_policy: Option<String>,
    /// The keys no level's field carries, with the level that set each.
    pub(super) other: Vec<(&'static str, String)>,
}

impl Topology {
    /// Node `name`'s settings, resolved through defaults, kind, group and node.
    pub(super) fn resolve(&self, name: &str) -> Resolved {
        let empty = NodeDef::default();
        let node = self
            .nodes
            .get(name)
            .and_then(Option::as_ref)
            .unwrap_or(&empty);
        let defaults = &self.defaults;
        let kind = node
            .kind
            .clone()
            .or_else(|| group_def(self, node.group.as_deref()).and_then(|g| g.kind.clone()))
            .or_else(|| group_def(self, defaults.group.as_deref()).and_then(|g| g.kind.clone()))
            .or_else(|| defaults.kind.clone());
        let kind_def = kind.as_deref().and_then(|k| self.kinds.get(k));
        let group = node
            .group
            .clone()
            .or_else(|| kind_def.and_then(|k| k.group.clone()))
            .or_else(|| defaults.group.clone());
        let group_def = group_def(self, group.as_deref());
        // Least specific first.
        let levels: Vec<(&'static str, &NodeDef)> = [
            Some(("defaults", defaults)),
            kind_def.map(|k| ("kinds", k)),
            group_def.map(|g| ("groups", g)),
            Some(("nodes", node)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let most_specific = |field: fn(&NodeDef) -> Option<&String>| {
            levels.iter().rev().find_map(|(_, l)| field(l)).cloned()
        };
        let merged_map = |field: fn(&NodeDef) -> &BTreeMap<String, Scalar>| {
            let mut out = BTreeMap::new();
            for (_, level) in &levels {
                out.extend(field(level).iter().map(|(k, v)| (k.clone(), v.text())));
            }
            out
        };
        let merged_list = |field: fn(&NodeDef) -> &Vec<String>| {
            let mut seen = BTreeSet::new();
            levels
                .iter()
                .flat_map(|(_, l)| field(l).iter())
                .filter(|item| seen.insert(item.as_str()))
                .cloned()
                .collect::<Vec<String>>()
        };
        let mut by_target = BTreeMap::new();
        for bind in merged_list(|l| &l.binds) {
            by_target.insert(bind_target(&bind).to_owned(), bind);
        }
        let mut binds: Vec<String> = by_target.into_values().collect();
        binds.sort();
        Resolved {
            image: most_specific(|l| l.image.as_ref()),
            cmd: most_specific(|l| l.cmd.as_ref()),
            startup_config: most_specific(|l| l.startup_config.as_ref()),
            image_pull_policy: most_specific(|l| l.image_pull_policy.as_ref()),
            env: merged_map(|l| &l.env),
            labels: merged_map(|l| &l.labels),
            exec: merged_list(|l| &l.exec),
            binds,
            ports: levels
                .iter()
                .rev()
                .map(|(_, l)| &l.ports)
                .find(|p| !p.is_empty())
                .cloned()
                .unwrap_or_default(),
            other: levels
                .iter()
                .flat_map(|(level, l)| set_keys(&l.other).map(move |k| (*level, k.to_owned())))
                .collect(),
            kind,
            group,
        }
    }
}

fn group_def<'a>(topology: &'a Topology, group: Option<&str>) -> Option<&'a NodeDef> {
    topology.groups.get(group?)
}

/// The container path of a `HOST:CONTAINER[:OPTIONS]` bind (a bare path is both).
fn bind_target(bind: &str) -> &str {
    let mut parts = bind.split(':');
    let first = parts.next().unwrap_or_default();
    parts.next().unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topology(yaml: &str) -> Topology {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    const LEVELS: &str = r#"
defaults:
  kind: linux
  image: img/defaults
  env: {A: defaults, B: defaults}
  labels: {tier: any}
  binds: ["/d:/etc/one", "/shared:/etc/shared"]
  exec: ["echo defaults", "echo same"]
  ports: ["80:80"]
kinds:
  linux:
    image: img/kind
    env: {B: kind, C: kind}
    exec: ["echo kind", "echo same"]
    binds: ["/k:/etc/one"]
  nokia_srlinux: {image: img/srl}
groups:
  spines:
    image: img/group
    env: {C: group, D: 4}
    labels: {tier: spine}
    binds: ["/g:/etc/one:ro"]
    exec: ["echo group"]
    ports: ["22:22", "443:443"]
    startup-config: spine.cfg
  srls: {kind: nokia_srlinux}
nodes:
  s1:
    group: spines
    env: {D: node}
    exec: ["echo node"]
  plain:
  leaf:
    image: img/node
    ports: ["8080:80"]
    mystery: 1
  srl1: {group: srls}
"#;

    #[test]
    fn one_value_fields_take_the_most_specific_level_that_sets_them() {
        let t = topology(LEVELS);
        assert_eq!(t.resolve("s1").image.as_deref(), Some("img/group"));
        assert_eq!(t.resolve("plain").image.as_deref(), Some("img/kind"));
        assert_eq!(t.resolve("leaf").image.as_deref(), Some("img/node"));
        assert_eq!(t.resolve("s1").startup_config.as_deref(), Some("spine.cfg"));
        assert_eq!(t.resolve("plain").startup_config, None);
    }

    #[test]
    fn env_and_labels_merge_key_by_key_and_lists_add_up_without_repeats() {
        let s1 = topology(LEVELS).resolve("s1");
        let env: Vec<(&str, &str)> = s1
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            env,
            [
                ("A", "defaults"),
                ("B", "kind"),
                ("C", "group"),
                ("D", "node")
            ]
        );
        assert_eq!(s1.labels["tier"], "spine");
        assert_eq!(
            s1.exec,
            [
                "echo defaults",
                "echo same",
                "echo kind",
                "echo group",
                "echo node"
            ]
        );
        // The most specific bind of each container path, sorted.
        assert_eq!(s1.binds, ["/g:/etc/one:ro", "/shared:/etc/shared"]);
        assert_eq!(topology(LEVELS).resolve("plain").binds[0], "/k:/etc/one");
    }

    #[test]
    fn ports_are_the_most_specific_list_whole() {
        let t = topology(LEVELS);
        assert_eq!(t.resolve("s1").ports, ["22:22", "443:443"]);
        assert_eq!(t.resolve("leaf").ports, ["8080:80"]);
        assert_eq!(t.resolve("plain").ports, ["80:80"]);
    }

    #[test]
    fn a_groups_kind_is_the_nodes_and_its_kinds_settings_follow() {
        let srl = topology(LEVELS).resolve("srl1");
        assert_eq!(srl.kind.as_deref(), Some("nokia_srlinux"));
        assert_eq!(srl.group.as_deref(), Some("srls"));
        assert_eq!(srl.image.as_deref(), Some("img/srl"));
        assert_eq!(
            topology(LEVELS).resolve("plain").kind.as_deref(),
            Some("linux")
        );
    }

    #[test]
    fn keys_no_field_carries_are_kept_with_their_level() {
        let leaf = topology(LEVELS).resolve("leaf");
        assert_eq!(leaf.other, [("nodes", "mystery".to_string())]);
    }

    #[test]
    fn a_null_is_nothing_set_and_an_env_value_of_null_is_empty_text() {
        let t = topology(
            "defaults: ~\nkinds: ~\nnodes:\n  r1: {env: {A: ~, B: 1}, labels: ~, binds: ~, exec: ~, ports: ~, mgmt-ipv4: ~, cmd: ~}\nlinks: ~\n",
        );
        let r1 = t.resolve("r1");
        assert_eq!(r1.env["A"], "");
        assert_eq!(r1.env["B"], "1");
        assert!(r1.labels.is_empty() && r1.binds.is_empty() && r1.exec.is_empty());
        assert_eq!(r1.cmd, None);
        assert!(r1.other.is_empty(), "{:?}", r1.other);
        assert!(t.links.is_empty());
    }
}
