//! The standalone lab (`xwirectl lab`): each emulated node a network namespace running its
//! own `xwired` (supervised, with its own embedded store and a certificate from the lab's
//! CA), nodes joined by an underlay bridge in the lab's own namespace, each pod a
//! namespace wired by the same CNI plugin binary a runtime would call. The lab file
//! becomes the Topology objects a cluster would hold, so both take the same path.
//!
//! Unsafe code: one use, registering the signal handler that lets `lab up` stop cleanly
//! (`up.rs`).

pub mod baseline;
pub mod bench;
pub mod capture;
mod chart;
pub mod containers;
pub mod down;
pub mod edit;
pub mod file;
pub mod graph;
pub mod impair;
pub mod import;
pub mod list;
pub mod logs;
pub mod mgmt;
pub mod namespaces;
pub mod netdev;
pub mod node_api;
pub mod paths;
pub mod status;
pub mod supervisor;
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
        let status = containers::exec_command(lab, pod, command)
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
    match name {
        Some(name) => status::read_lab(name),
        None => match paths::labs_up().as_slice() {
            [one] => status::read_lab(one),
            [] => bail!("no lab is up"),
            many => bail!("several labs are up ({}): name one", many.join(", ")),
        },
    }
}
