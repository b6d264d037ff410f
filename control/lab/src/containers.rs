//! Pods that run a container image: podman runs each in the network namespace the lab made
//! and wired for its pod (`--network ns:PATH`), so the container sees exactly the pod's
//! interfaces. Images come from the local store only (`--pull never`): a missing one is
//! named, with how to build or load it, before the lab makes anything.
//!
//! Podman is run as this machine needs it (see `../shared/clients/README.md`): runc
//! where it is installed (crun cannot run in a hybrid cgroup layout), cgroupfs, and file
//! limits no higher than this process's own hard limit.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};
use xwire_model::lab::LAB_LABEL;

use super::file::{Container, Lab, PullPolicy};
use super::paths::LabPaths;

/// The container of `pod` in lab `lab`.
pub(crate) fn container_name(lab: &str, pod: &str) -> String {
    format!("xwire-lab-{lab}-{pod}")
}

fn podman() -> Command {
    let mut command = Command::new("podman");
    if on_path("runc") {
        command.args(["--runtime", "runc"]);
    }
    command.args(["--cgroup-manager", "cgroupfs"]);
    command
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|dir| dir.join(program).is_file())
}

fn output(command: &mut Command, what: &str) -> Result<Output> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{what}: cannot run podman (apt-get install podman runc)"))?;
    Ok(out)
}

fn checked(command: &mut Command, what: &str) -> Result<String> {
    let out = output(command, what)?;
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Makes every bind's relative host path absolute, from the directory of the lab file
/// `file`.
pub(crate) fn resolve_binds(lab: &mut Lab, file: &Path) {
    let base = directory_of(file);
    for container in lab.containers.values_mut() {
        for bind in &mut container.binds {
            *bind = absolute_bind(&base, bind);
        }
    }
}

/// The directory `file` is in, absolute where it exists.
pub(crate) fn directory_of(file: &Path) -> std::path::PathBuf {
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
}

/// `bind` (`HOST:CONTAINER[:OPTIONS]`) with a relative host path taken from `base`.
pub(crate) fn absolute_bind(base: &Path, bind: &str) -> String {
    if bind.starts_with('/') {
        bind.to_owned()
    } else {
        format!("{}/{bind}", base.display())
    }
}

/// Has every image of the lab in the local store, pulled as each pod's
/// `image_pull_policy` says (podman's progress shown on standard error as it goes), and
/// refuses a lab whose images cannot be had, or whose binds name host paths that do not
/// exist: before anything is made, naming the pods and the image.
pub(crate) fn ensure_images(lab: &Lab) -> Result<()> {
    if lab.containers.is_empty() {
        return Ok(());
    }
    if !on_path("podman") {
        bail!(
            "pods {} run images, and podman is not installed (apt-get install podman runc)",
            lab.containers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for (pod, container) in &lab.containers {
        for bind in &container.binds {
            let host = bind.split(':').next().unwrap_or_default();
            if !Path::new(host).exists() {
                bail!("pod {pod}: bind {bind}: {host} does not exist");
            }
        }
    }
    for (image, policy, pods) in images_to_have(lab) {
        let pods = pods.join(", ");
        let present = output(
            podman().args(["image", "exists", image]),
            "look for an image",
        )?
        .status
        .success();
        match policy {
            PullPolicy::IfNotPresent if present => {}
            PullPolicy::Never if present => {}
            PullPolicy::Never => bail!(
                "image {image} (pods {pods}) is not in the local image store, and its \
                 image_pull_policy is Never: build it (podman build -t NAME DIR) or load it \
                 (podman load -i ARCHIVE) first"
            ),
            PullPolicy::IfNotPresent | PullPolicy::Always => pull(image).with_context(|| {
                format!("pulling image {image} for pods {pods} (a registry must have it; or build or load it, and give the pods image_pull_policy: Never)")
            })?,
        }
    }
    Ok(())
}

/// Each image of the lab once, with the policy that asks the most of it (Always over
/// IfNotPresent over Never) and the pods that run it.
fn images_to_have(lab: &Lab) -> Vec<(&str, PullPolicy, Vec<&str>)> {
    let mut images: BTreeMap<&str, (PullPolicy, Vec<&str>)> = BTreeMap::new();
    for (pod, container) in &lab.containers {
        let entry = images
            .entry(container.image.as_str())
            .or_insert((container.image_pull_policy, Vec::new()));
        entry.0 = entry.0.max(container.image_pull_policy);
        entry.1.push(pod);
    }
    images
        .into_iter()
        .map(|(image, (policy, pods))| (image, policy, pods))
        .collect()
}

/// `podman pull IMAGE`, its progress passed to standard error line by line, and its
/// last lines kept for the error if it fails.
fn pull(image: &str) -> Result<()> {
    use std::io::BufRead;
    eprintln!("pulling {image}");
    let mut child = podman()
        .args(["pull", image])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run podman (apt-get install podman runc)")?;
    let mut last = std::collections::VecDeque::new();
    let stderr = child.stderr.take().expect("stderr is piped");
    for line in std::io::BufReader::new(stderr).lines() {
        let Ok(line) = line else { break };
        eprintln!("  {line}");
        if last.len() == 3 {
            last.pop_front();
        }
        last.push_back(line);
    }
    let status = child.wait()?;
    if !status.success() {
        let said: Vec<String> = last.into_iter().collect();
        bail!("podman pull failed ({status}): {}", said.join(" / "));
    }
    Ok(())
}

/// Starts pod `pod`'s container in its namespace, detached.
pub fn start(lab: &Lab, pod: &str, container: &Container) -> Result<()> {
    let paths = LabPaths::of(lab);
    let netns = xwire_netns::named::path(&paths.pod_netns(pod));
    let nofile = hard_file_limit();
    let mut command = podman();
    command
        .args(["run", "--detach", "--pull", "never", "--name"])
        .arg(container_name(&lab.name, pod))
        .arg("--label")
        .arg(format!("{LAB_LABEL}={}", lab.name))
        .arg("--network")
        .arg(format!("ns:{}", netns.display()))
        .args(["--hostname", pod])
        // What a router image needs to configure its interfaces and send raw frames.
        .args(["--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW"])
        .arg("--ulimit")
        .arg(format!("nofile={nofile}:{nofile}"))
        .args(["--ulimit", "nproc=4096:4096"]);
    for (key, value) in &container.env {
        command.arg("--env").arg(format!("{key}={value}"));
    }
    // The lab's own label is what `lab down` finds its containers by: a pod's labels do
    // not replace it (the lab file refuses the name).
    for (key, value) in container.labels.iter().filter(|(k, _)| *k != LAB_LABEL) {
        command.arg("--label").arg(format!("{key}={value}"));
    }
    for bind in &container.binds {
        command.arg("--volume").arg(bind);
    }
    command.arg(&container.image);
    if let Some(cmd) = &container.cmd {
        command.args(cmd);
    }
    checked(&mut command, &format!("pod {pod}: start its container"))?;
    Ok(())
}

/// Runs the pod's `exec` commands in its container, in order; the first that fails stops
/// the lab's start, with its output.
pub(crate) fn run_exec(lab: &Lab, pod: &str, container: &Container) -> Result<()> {
    for line in &container.exec {
        let out = output(
            &mut exec_command(lab, pod, &["sh", "-c", line], false),
            "exec",
        )?;
        if !out.status.success() {
            let said = format!(
                "{} {}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
            bail!(
                "pod {pod}: exec {line:?} failed ({}): {}",
                out.status,
                said.trim()
            );
        }
    }
    Ok(())
}

/// The command that runs `command` inside pod `pod`'s container. `interactive` (`lab
/// exec` on one pod): with this process's input, and a terminal when it has one;
/// otherwise with neither (exec lines, `lab exec` on several pods, `lab save`).
pub(crate) fn exec_command<S: AsRef<std::ffi::OsStr>>(
    lab: &Lab,
    pod: &str,
    command: &[S],
    interactive: bool,
) -> Command {
    use std::io::IsTerminal;
    let mut podman = podman();
    podman.arg("exec");
    if interactive {
        podman.arg("--interactive");
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() {
            podman.arg("--tty");
        }
    }
    podman.arg(container_name(&lab.name, pod)).args(command);
    podman
}

/// The container's state as podman says it (`running`, `exited`, ...), or `missing`.
pub fn state(lab: &Lab, pod: &str) -> String {
    let out = output(
        podman()
            .args(["container", "inspect", "--format", "{{.State.Status}}"])
            .arg(container_name(&lab.name, pod)),
        "inspect",
    );
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        _ => "missing".into(),
    }
}

/// Removes pod `pod`'s container.
pub fn remove(lab: &Lab, pod: &str) -> Result<()> {
    checked(
        podman()
            .args(["rm", "--force", "--ignore", "--time", "0"])
            .arg(container_name(&lab.name, pod)),
        &format!("pod {pod}: remove its container"),
    )
    .map(drop)
}

/// Removes every container of lab `name` (by its label), running or not; returns how
/// many. Nothing to do, and no podman run, when podman is not installed.
pub fn remove_all(name: &str) -> usize {
    if !on_path("podman") {
        return 0;
    }
    let listed = checked(
        podman()
            .args(["ps", "--all", "--quiet", "--filter"])
            .arg(format!("label={LAB_LABEL}={name}")),
        "list the lab's containers",
    );
    let ids: Vec<String> = match listed {
        Ok(text) => text.split_whitespace().map(str::to_owned).collect(),
        Err(e) => {
            eprintln!("{e:#}");
            return 0;
        }
    };
    if ids.is_empty() {
        return 0;
    }
    if let Err(e) = checked(
        podman().args(["rm", "--force", "--time", "0"]).args(&ids),
        "remove the lab's containers",
    ) {
        eprintln!("{e:#}");
    }
    ids.len()
}

/// This process's hard limit of open files: podman's default (about a million) is more
/// than an unprivileged VM lets a container set, and the start fails.
fn hard_file_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(_, hard)| hard.min(1 << 20))
        .unwrap_or(1024)
}
