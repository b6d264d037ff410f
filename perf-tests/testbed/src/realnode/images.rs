//! The images a node runs, made here and loaded into its containerd; nothing is pulled.
//! One image `FROM scratch` holds a static busybox: it is the sandbox ("pause") image,
//! its entry point a shell that waits for a signal, and under the name KNE's example
//! pods give (`busybox:stable`) their containers, which name their own command.

use std::path::Path;
use std::process::Command;

use super::run;

pub const SANDBOX: &str = "localhost/xwt-pause:1";
pub const BUSYBOX: &str = "docker.io/library/busybox:stable";

/// Builds the busybox image under both names in `dir` and saves it as a docker archive
/// per name; podman's own copies are removed again.
pub fn build(busybox: &Path, dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(rootfs.join("bin")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(rootfs.join("tmp")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(rootfs.join("etc")).map_err(|e| e.to_string())?;
    std::fs::copy(busybox, rootfs.join("bin/busybox")).map_err(|e| e.to_string())?;
    let applets = run(Command::new(busybox).arg("--list"))?;
    for applet in applets.lines().filter(|a| !a.is_empty() && *a != "busybox") {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))
            .map_err(|e| e.to_string())?;
    }
    // PID 1 of a sandbox only holds its namespaces: it sleeps until told to stop.
    std::fs::write(
        dir.join("Containerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENV PATH=/bin\n\
         ENTRYPOINT [\"/bin/sh\", \"-c\", \"trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done\"]\n",
    )
    .map_err(|e| e.to_string())?;
    let mut archives = Vec::new();
    for (n, tag) in [SANDBOX, BUSYBOX].into_iter().enumerate() {
        let existed = run(Command::new("podman").args(["image", "exists", tag])).is_ok();
        run(Command::new("podman")
            .args(["build", "-q", "--network=none", "-t", tag, "-f"])
            .arg(dir.join("Containerfile"))
            .arg(dir))?;
        let archive = dir.join(format!("image-{n}.tar"));
        let saved = run(Command::new("podman")
            .args(["save", "--format", "docker-archive", "-o"])
            .arg(&archive)
            .arg(tag));
        if !existed {
            let _ = run(Command::new("podman").args(["rmi", "-f", tag]));
        }
        saved?;
        archives.push(archive);
    }
    Ok(archives)
}

/// Imports an image archive into containerd's `k8s.io` namespace, where the kubelet's
/// images are. An OCI archive names its image by tag alone; `base_name` is the name
/// that tag belongs to.
pub fn load(
    ctr: &Path,
    socket: &Path,
    archive: &Path,
    base_name: Option<&str>,
) -> Result<(), String> {
    let mut cmd = Command::new(ctr);
    cmd.arg("--address")
        .arg(socket)
        .args(["-n", "k8s.io", "images", "import"]);
    if let Some(base) = base_name {
        cmd.args(["--base-name", base]);
    }
    run(cmd.arg(archive)).map(drop)
}
