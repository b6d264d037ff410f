//! `xwirectl lab edit FILE`: applies a changed lab file to the running lab. Links and
//! pods added appear and those removed disappear; pods that stay are not restarted, and
//! their other wires carry on. A link that stays keeps its uid (its wire), also when the
//! file gives it none. The nodes cannot change while the lab runs.

use std::path::Path;

use anyhow::{bail, Context, Result};
use xwire_proto::local::{Request, TopologyQuery};

use super::file::{self, Lab, LabLink};
use super::paths::LabPaths;
use super::up::{call_plugin, wait_for_wires, Binaries};
use super::{containers, mgmt, namespaces, node_api, status};

/// What an edit changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub links_added: Vec<u64>,
    pub links_removed: Vec<u64>,
    pub pods_added: Vec<String>,
    pub pods_removed: Vec<String>,
    /// Links that stay whose impairment changed (they are not made again).
    pub links_impaired: Vec<u64>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// What turns `old` into `new`, or why it cannot be done on a running lab.
pub fn plan(old: &Lab, new: &Lab) -> Result<Changes> {
    if new.nodes != old.nodes {
        bail!(
            "the nodes changed ({} -> {}): nodes cannot change while the lab runs; take it down and up again",
            old.nodes.join(", "),
            new.nodes.join(", ")
        );
    }
    if new.frames_per_port != old.frames_per_port {
        bail!(
            "frames_per_port changed: the daemons read it as they start; take the lab down and up again"
        );
    }
    for (pod, node) in &new.pods {
        if let Some(was) = old.pods.get(pod) {
            if was != node {
                bail!("pod {pod} moved from {was} to {node}: remove it in one edit and add it in the next");
            }
            if old.containers.get(pod) != new.containers.get(pod) {
                bail!("pod {pod}'s container (image, cmd, env, binds or exec) changed: remove the pod in one edit and add it in the next");
            }
        }
    }
    if old.mgmt.is_some() != new.mgmt.is_some() {
        bail!("the management network was turned on or off: that needs a `lab down` and `lab up`");
    }
    if let (Some(a), Some(b)) = (&old.mgmt, &new.mgmt) {
        if (&a.interface, &a.ipv4_subnet, &a.ipv6_subnet)
            != (&b.interface, &b.ipv4_subnet, &b.ipv6_subnet)
        {
            bail!("the management network's interface or subnets changed: that needs a `lab down` and `lab up`");
        }
    }
    let link_uids = |links: Vec<&LabLink>| links.into_iter().map(|l| l.uid).collect();
    let names = |pods: Vec<&String>| pods.into_iter().cloned().collect();
    // An impairment changes in place: the link is the same wire.
    let bare = |l: &LabLink| LabLink {
        impair: [None, None],
        ..l.clone()
    };
    let has = |links: &[LabLink], l: &LabLink| links.iter().any(|o| bare(o) == bare(l));
    Ok(Changes {
        links_added: link_uids(only_in(&new.links, |l| has(&old.links, l))),
        links_removed: link_uids(only_in(&old.links, |l| has(&new.links, l))),
        links_impaired: new
            .links
            .iter()
            .filter(|l| {
                old.links
                    .iter()
                    .any(|o| bare(o) == bare(l) && o.impair != l.impair)
            })
            .map(|l| l.uid)
            .collect(),
        pods_added: names(only_in(new.pods.keys(), |p| old.pods.contains_key(*p))),
        pods_removed: names(only_in(old.pods.keys(), |p| new.pods.contains_key(*p))),
    })
}

/// The items of `these` that `elsewhere` does not hold, in order.
fn only_in<T>(these: impl IntoIterator<Item = T>, elsewhere: impl Fn(&T) -> bool) -> Vec<T> {
    these.into_iter().filter(|x| !elsewhere(x)).collect()
}

pub fn edit(file: &Path, binaries: &Binaries) -> Result<(Lab, Changes)> {
    let text = crate::file::read(file).with_context(|| format!("read {}", file.display()))?;
    // The name first, to find the running lab whose uids the new file keeps.
    let name = file::parse(&text, None)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?
        .name;
    let old = status::read_lab(&name)?;
    let mut new =
        file::parse(&text, Some(&old)).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    containers::resolve_binds(&mut new, file);
    let changes = plan(&old, &new)?;
    containers::ensure_images(&new)?;
    if changes.is_empty() {
        return Ok((new, changes));
    }
    let paths = LabPaths::new(&name)?;
    for pod in &changes.pods_removed {
        if old.containers.contains_key(pod) {
            containers::remove(&old, pod)?;
        }
        call_plugin(&paths, binaries, "DEL", pod, &old.pods[pod])?;
        mgmt::remove_pod(&old, &paths, pod)?;
    }
    // A removed pod's topology goes before the new one comes: a link added in this edit
    // may take the uid of one of its links.
    for node in &new.nodes {
        let socket = paths.node_socket(node);
        for pod in &changes.pods_removed {
            let query = TopologyQuery {
                namespace: Some(name.clone()),
                name: Some(pod.clone()),
            };
            node_api::ask(&socket, &Request::TopologyDelete(query))
                .with_context(|| format!("remove pod {pod}'s topology on node {node}"))?;
        }
    }
    for pod in &changes.pods_added {
        namespaces::create(&paths.pod_netns(pod))?;
        let node_ns = namespaces::open(&paths.node_netns(&new.pods[pod]))?;
        mgmt::add_pod(&new, &paths, pod, &node_ns)?;
    }
    // A link whose settings changed (same uid) goes first and comes back changed: the
    // daemons join and part wires by uid.
    let changed: Vec<u64> = changes
        .links_added
        .iter()
        .filter(|uid| changes.links_removed.contains(uid))
        .copied()
        .collect();
    if !changed.is_empty() {
        let mut without = new.clone();
        without.links.retain(|l| !changed.contains(&l.uid));
        without.pods.retain(|p, _| old.pods.contains_key(p));
        node_api::apply_topology(&without, &paths)?;
    }
    node_api::apply_topology(&new, &paths)?;
    for pod in &changes.pods_removed {
        namespaces::remove(&paths.pod_netns(pod));
    }
    for pod in &changes.pods_added {
        call_plugin(&paths, binaries, "ADD", pod, &new.pods[pod])?;
    }
    std::fs::write(paths.lab_file(), serde_json::to_vec_pretty(&new)?)?;
    wait_for_wires(&new, &paths)?;
    for pod in &changes.pods_added {
        if let Some(container) = new.containers.get(pod) {
            containers::start(&new, pod, container)?;
            containers::run_exec(&new, pod, container)?;
        }
    }
    Ok((new, changes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_per_port_cannot_change_while_the_lab_runs() {
        let file = "name: e\nnodes: [n1]\npods:\n  a: {node: n1}\n  b: {node: n1}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n";
        let old = crate::file::parse(file, None).unwrap();
        let same = crate::file::parse(file, Some(&old)).unwrap();
        assert!(plan(&old, &same).is_ok());
        let more = file.replacen("nodes:", "frames_per_port: 128\nnodes:", 1);
        let new = crate::file::parse(&more, Some(&old)).unwrap();
        let refused = plan(&old, &new).expect_err("refused");
        assert!(refused.to_string().contains("frames_per_port"), "{refused}");
    }
}
