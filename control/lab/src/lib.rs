//! The standalone lab (`xwirectl lab`): each emulated node a network namespace running its
//! own `xwired` (supervised, with its own embedded store and a certificate from the lab's
//! CA), nodes joined by an underlay bridge in the lab's own namespace, each pod a
//! namespace wired by the same CNI plugin binary a runtime would call. The lab file
//! becomes the Topology objects a cluster would hold, so both take the same path.

#![forbid(unsafe_code)]

pub mod baseline;
pub mod bench;
pub mod capture;
mod chart;
pub mod containers;
pub mod down;
pub mod edit;
pub mod file;
pub mod graph;
pub mod impairment;
pub mod import;
pub mod list;
pub mod logs;
pub mod mgmt;
pub mod namespaces;
mod neighbours;
pub mod netdev;
pub(crate) mod node_api;
pub mod paths;
pub mod save;
pub mod status;
pub mod supervisor;
pub mod table;
pub mod underlay;
pub mod up;

use anyhow::{bail, Result};

use file::Lab;
use paths::LabPaths;

/// The running lab that has `pod`: the one named, or the only one with such a pod.
pub fn lab_with_pod(lab_name: Option<&str>, pod: &str) -> Result<Lab> {
    let names = match lab_name {
        Some(name) => {
            LabPaths::new(name)?;
            vec![name.to_owned()]
        }
        None => paths::labs_up(),
    };
    let mut found: Vec<Lab> = names
        .iter()
        .filter_map(|name| status::read_lab(name).ok())
        .filter(|lab| lab.pods.contains_key(pod))
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => match lab_name {
            Some(name) => bail!("lab {name} has no pod {pod} (or is not up)"),
            None => bail!("no lab that is up has a pod {pod}"),
        },
        _ => bail!(
            "several labs have a pod {pod} ({}): pick one with --lab",
            found
                .iter()
                .map(|l| l.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Runs `command` inside `pod` (its container, for a pod that runs one; else its
/// namespace) with this terminal; returns its exit code.
pub fn exec(lab: &Lab, pod: &str, command: &[String]) -> Result<i32> {
    let Some((program, args)) = command.split_first() else {
        bail!("no command to run (xwirectl lab exec POD -- COMMAND ARGS...)");
    };
    if lab.containers.contains_key(pod) {
        let status = containers::exec_command(lab, pod, command, true)
            .status()
            .map_err(|e| anyhow::anyhow!("cannot run podman exec in pod {pod}: {e}"))?;
        return Ok(exit_code(status));
    }
    let ns = namespaces::open(&LabPaths::of(lab).pod_netns(pod))?;
    let status = ns
        .run("run a command in a pod", || {
            std::process::Command::new(program).args(args).status()
        })?
        .map_err(|e| anyhow::anyhow!("cannot run {program} in pod {pod}: {e}"))?;
    Ok(exit_code(status))
}

/// Runs `command` inside `pod` with no terminal and no input, and returns what it wrote
/// (`lab exec` on several pods).
pub fn exec_captured(lab: &Lab, pod: &str, command: &[String]) -> Result<std::process::Output> {
    use std::process::{Command, Stdio};
    let Some((program, args)) = command.split_first() else {
        bail!("no command to run (xwirectl lab exec --all -- COMMAND ARGS...)");
    };
    if lab.containers.contains_key(pod) {
        return containers::exec_command(lab, pod, command, false)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| anyhow::anyhow!("cannot run podman exec in pod {pod}: {e}"));
    }
    let ns = namespaces::open(&LabPaths::of(lab).pod_netns(pod))?;
    ns.run("run a command in a pod", || {
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
    })?
    .map_err(|e| anyhow::anyhow!("cannot run {program} in pod {pod}: {e}"))
}

/// Which pods `lab exec` runs in when it is not given one: all, or those whose
/// container labels include every KEY=VALUE given (a pod without a container has none).
#[derive(Debug, PartialEq)]
pub enum PodSelector {
    All,
    Labels(Vec<(String, String)>),
}

impl PodSelector {
    pub fn parse(all: bool, labels: &[String]) -> Result<PodSelector> {
        if all {
            return Ok(PodSelector::All);
        }
        let pairs = labels
            .iter()
            .map(|l| match l.split_once('=') {
                Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
                _ => bail!("--label {l:?} is not KEY=VALUE"),
            })
            .collect::<Result<Vec<_>>>()?;
        if pairs.is_empty() {
            bail!("name a pod, or choose pods with --all or --label KEY=VALUE");
        }
        Ok(PodSelector::Labels(pairs))
    }

    /// The lab's pods it selects, by name.
    pub fn pods(&self, lab: &Lab) -> Vec<String> {
        lab.pods
            .keys()
            .filter(|pod| match self {
                PodSelector::All => true,
                PodSelector::Labels(pairs) => lab.containers.get(*pod).is_some_and(|c| {
                    pairs
                        .iter()
                        .all(|(k, v)| c.labels.get(k).is_some_and(|have| have == v))
                }),
            })
            .cloned()
            .collect()
    }
}

impl std::fmt::Display for PodSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PodSelector::All => write!(f, "any pod"),
            PodSelector::Labels(pairs) => {
                let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                write!(f, "the label(s) {}", pairs.join(", "))
            }
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0))
}

/// A lab's name, given as itself or as the path of its lab file: an argument that names
/// a file that exists is read as the lab file; anything else is a name (and checked as
/// one where it is used).
pub fn name_or_file(arg: &str) -> Result<String> {
    if !std::path::Path::new(arg).is_file() {
        return Ok(arg.to_owned());
    }
    let text = file::read(std::path::Path::new(arg))
        .map_err(|e| anyhow::anyhow!("cannot read the lab file {arg}: {e}"))?;
    let lab = file::parse(&text, None).map_err(|e| anyhow::anyhow!("{arg}: {e}"))?;
    Ok(lab.name)
}

/// The one lab that is up, or the one named.
pub fn pick_lab(name: Option<&str>) -> Result<Lab> {
    let name = name.map(name_or_file).transpose()?;
    let name = name.as_deref();
    match name {
        Some(name) => status::read_lab(name),
        None => match paths::labs_up().as_slice() {
            [one] => status::read_lab(one),
            [] => bail!("no lab is up"),
            many => bail!(
                "several labs are up ({}): pick one with --lab",
                many.join(", ")
            ),
        },
    }
}
