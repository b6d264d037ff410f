//! What a real node changes on the host outside its own directory, each change recorded
//! with how to undo it, and undone in reverse order when dropped (also when a test
//! fails): the node's address, the DNAT that stands in for kube-proxy, `/` made a shared
//! mount, the primary CNI's conflist and plugins, and the host directories the
//! DaemonSet mounts.

use std::path::{Path, PathBuf};
use std::process::Command;

enum Undo {
    Run(Vec<String>),
    RemoveFile(PathBuf),
    RemoveDir(PathBuf),
    WriteFile(PathBuf, String),
}

#[derive(Default)]
pub struct HostChanges {
    undo: Vec<Undo>,
}

/// Runs `args` (a program and its arguments) to its end.
fn run(args: &[&str]) -> Result<(), String> {
    super::run(Command::new(args[0]).args(&args[1..])).map(drop)
}

/// The nft table that stands in for kube-proxy for the one Service a node needs:
/// connections to `service_ip`:443, made locally or forwarded from pods, go to `api`.
pub(super) fn service_dnat_rules(table: &str, service_ip: &str, api: &str) -> String {
    format!(
        "table ip {table} {{\n\
         chain output {{ type nat hook output priority -100; ip daddr {service_ip} tcp dport 443 dnat to {api}; }}\n\
         chain prerouting {{ type nat hook prerouting priority -100; ip daddr {service_ip} tcp dport 443 dnat to {api}; }}\n\
         }}\n"
    )
}

impl HostChanges {
    /// An empty bridge holding the node's address (this kernel has no `dummy` module),
    /// with the Service range routed to it so that the host's own connections to the
    /// `kubernetes` Service address have a route for the DNAT below to rewrite.
    pub fn node_address(
        &mut self,
        ifname: &str,
        node_ip: &str,
        services: &str,
    ) -> Result<(), String> {
        run(&["ip", "link", "add", ifname, "type", "bridge"])?;
        self.undo.push(Undo::Run(
            ["ip", "link", "del", ifname].map(String::from).to_vec(),
        ));
        run(&["ip", "addr", "add", &format!("{node_ip}/32"), "dev", ifname])?;
        run(&["ip", "link", "set", ifname, "up"])?;
        run(&["ip", "route", "add", services, "dev", ifname])
    }

    /// Forwarding on, for pods behind the primary bridge to reach the node's address.
    pub fn forwarding(&mut self) -> Result<(), String> {
        let path = PathBuf::from("/proc/sys/net/ipv4/ip_forward");
        let before = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        if before.trim() != "1" {
            std::fs::write(&path, "1").map_err(|e| e.to_string())?;
            self.undo.push(Undo::WriteFile(path, before));
        }
        Ok(())
    }

    /// What kube-proxy would do for the one Service the node needs: connections to the
    /// `kubernetes` Service address, from the host and from pods, go to the API server.
    pub fn service_dnat(&mut self, table: &str, service_ip: &str, api: &str) -> Result<(), String> {
        let rules = service_dnat_rules(table, service_ip, api);
        let file = std::env::temp_dir().join(format!("{table}.nft"));
        std::fs::write(&file, rules).map_err(|e| e.to_string())?;
        let result = run(&["nft", "-f", &file.to_string_lossy()]);
        let _ = std::fs::remove_file(&file);
        result?;
        self.undo.push(Undo::Run(
            ["nft", "delete", "table", "ip", table]
                .map(String::from)
                .to_vec(),
        ));
        Ok(())
    }

    /// `/` as a shared mount, as on kind's nodes and systemd hosts: containerd 1.6 checks
    /// a Bidirectional mount's host path as written (`/var/run/netns`, not through the
    /// `/var/run` symlink) and refuses it when the mount holding it is private.
    pub fn shared_root(&mut self) -> Result<(), String> {
        let mountinfo =
            std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
        let shared = mountinfo.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(4) == Some(&"/") && fields[6..].iter().any(|f| f.starts_with("shared:"))
        });
        if !shared {
            run(&["mount", "--make-shared", "/"])?;
            self.undo.push(Undo::Run(
                ["mount", "--make-private", "/"].map(String::from).to_vec(),
            ));
        }
        Ok(())
    }

    /// Makes `dir` (and its missing parents) when it is missing, to be removed with all
    /// it holds afterwards.
    pub fn directory(&mut self, dir: &Path) -> Result<(), String> {
        let mut missing = None;
        let mut at = Some(dir);
        while let Some(path) = at {
            if path.exists() {
                break;
            }
            missing = Some(path.to_path_buf());
            at = path.parent();
        }
        if let Some(top) = missing {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            self.undo.push(Undo::RemoveDir(top));
        }
        Ok(())
    }

    /// Copies `from` to `to` unless `to` exists; what was copied is removed afterwards.
    pub fn copy_if_missing(&mut self, from: &Path, to: &Path) -> Result<(), String> {
        if !to.exists() {
            std::fs::copy(from, to).map_err(|e| format!("{}: {e}", from.display()))?;
            self.undo.push(Undo::RemoveFile(to.to_path_buf()));
        }
        Ok(())
    }

    /// Removes `path` afterwards, unless it is there now: for a file something the
    /// node runs will make.
    pub fn remove_afterwards(&mut self, path: &Path) {
        if !path.exists() {
            self.undo.push(Undo::RemoveFile(path.to_path_buf()));
        }
    }

    /// Writes a new file `path`, removed afterwards (it must not exist).
    pub fn new_file(&mut self, path: &Path, text: &str) -> Result<(), String> {
        if path.exists() {
            return Err(format!("{} exists already", path.display()));
        }
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        self.undo.push(Undo::RemoveFile(path.to_path_buf()));
        Ok(())
    }
}

impl Drop for HostChanges {
    fn drop(&mut self) {
        while let Some(undo) = self.undo.pop() {
            let result = match &undo {
                Undo::Run(args) => run(&args.iter().map(String::as_str).collect::<Vec<_>>()),
                Undo::RemoveFile(path) => std::fs::remove_file(path)
                    .or_else(|e| match e.kind() {
                        std::io::ErrorKind::NotFound => Ok(()),
                        _ => Err(e),
                    })
                    .map_err(|e| e.to_string()),
                Undo::RemoveDir(path) => {
                    std::fs::remove_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))
                }
                Undo::WriteFile(path, text) => {
                    std::fs::write(path, text).map_err(|e| e.to_string())
                }
            };
            if let Err(e) = result {
                eprintln!("real node: undoing a host change: {e}");
            }
        }
    }
}
