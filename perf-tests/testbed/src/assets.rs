//! Where the tests find the binaries no package here ships (kube-apiserver and the rest
//! of Kubernetes), as envtest finds them: in `KUBEBUILDER_ASSETS`, then in
//! `/usr/local/kubebuilder/bin`, then on PATH.

use std::path::{Path, PathBuf};

/// The binary `name`, or why there is none.
pub fn find(name: &str) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS") {
        let path = Path::new(&dir).join(name);
        if path.is_file() {
            return Ok(path);
        }
    }
    on_path(name).ok_or_else(|| {
        format!(
            "no {name} in KUBEBUILDER_ASSETS, /usr/local/kubebuilder/bin or PATH (no package \
             registry ships the Kubernetes binaries; build them from Kubernetes source and \
             point KUBEBUILDER_ASSETS at them)"
        )
    })
}

/// `name` in `/usr/local/kubebuilder/bin` or on PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    ["/usr/local/kubebuilder/bin"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// A one-member etcd at `data_dir`, serving clients on 127.0.0.1:`client_port`.
pub fn etcd(
    binary: &Path,
    data_dir: &Path,
    client_port: u16,
    peer_port: u16,
) -> std::process::Command {
    let client = format!("http://127.0.0.1:{client_port}");
    let peer = format!("http://127.0.0.1:{peer_port}");
    let mut cmd = std::process::Command::new(binary);
    cmd.arg("--data-dir")
        .arg(data_dir)
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster=default={peer}"));
    cmd
}
