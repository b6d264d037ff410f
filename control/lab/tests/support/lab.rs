//! The lab as its tests drive it: the real `xwirectl` binary, and a lab that is taken
//! down when its test ends, also when it fails.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use super::{eventually, plugin_bin, TempDir};

pub fn xwirectl() -> Command {
    // The lab finds the daemon and the plugin next to xwirectl.
    super::xwired();
    plugin_bin();
    let mut xwirectl = Command::new(env!("CARGO_BIN_EXE_xwirectl"));
    // Tables wrap to COLUMNS when a shell exports it; the tests read whole rows.
    xwirectl.env_remove("COLUMNS");
    xwirectl
}

pub fn run(args: &[&str]) -> Output {
    xwirectl().args(args).output().expect("run xwirectl")
}

pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A unique lab name: `label` and this process's id.
pub fn unique(label: &str) -> String {
    format!("{label}{}", std::process::id())
}

/// The demo's shape, named `name`.
pub fn demo(name: &str) -> String {
    format!(
        "name: {name}
nodes: [node-a, node-b]
pods:
  r1: {{node: node-a}}
  r2: {{node: node-a}}
  r3: {{node: node-b}}
links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: [10.0.12.1/30, 10.0.12.2/30]
  - endpoints: [r1:eth2, r3:eth1]
    ips: [10.0.13.1/30, 10.0.13.2/30]
    mtu: 9000
  - endpoints: [r2:eth2, r3:eth2]
    ips: [10.0.23.1/30, 10.0.23.2/30]
    carrier: stream
"
    )
}

/// A lab brought up from `yaml`, taken down on drop.
pub struct Lab {
    pub name: String,
    _dir: TempDir,
    pub file: PathBuf,
}

impl Lab {
    pub fn write(name: &str, yaml: &str) -> Lab {
        let dir = TempDir::new(name);
        let file = dir.0.join("lab.yaml");
        std::fs::write(&file, yaml).unwrap();
        Lab {
            name: name.into(),
            _dir: dir,
            file,
        }
    }

    pub fn up(name: &str, yaml: &str) -> Lab {
        let lab = Lab::write(name, yaml);
        let out = run(&["lab", "up", lab.file.to_str().unwrap()]);
        assert!(out.status.success(), "lab up failed:\n{}", text(&out));
        lab
    }

    pub fn status(&self) -> Value {
        let out = run(&["lab", "status", "--lab", &self.name, "--json"]);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn exec(&self, pod: &str, command: &[&str]) -> Output {
        let mut args = vec!["lab", "exec", "--lab", &self.name, pod, "--"];
        args.extend_from_slice(command);
        run(&args)
    }

    /// One ping from `pod` to `address` answers (within a few tries).
    pub fn pings(&self, pod: &str, address: &str, size: usize) -> bool {
        let size = size.to_string();
        eventually(Duration::from_secs(15), || {
            self.exec(
                pod,
                &[
                    "ping", "-c", "1", "-W", "1", "-M", "do", "-s", &size, address,
                ],
            )
            .status
            .success()
        })
    }

    pub fn pids(&self) -> Vec<i32> {
        processes_mentioning(&format!("/run/xwire/labs/{}/", self.name))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // A failing test shows what the daemons said, before the lab and its logs go.
        if std::thread::panicking() {
            let logs = run(&["lab", "logs", "--lab", &self.name, "-n", "60"]);
            eprintln!("the logs of lab {}:\n{}", self.name, text(&logs));
        }
        let _ = run(&["lab", "down", "--lab", &self.name]);
    }
}

pub fn processes_mentioning(mark: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(mark))
                .unwrap_or(false)
        })
        .collect()
}

/// The pid of the daemon of `node` in `lab`.
pub fn daemon_pid(lab: &Lab, node: &str) -> Option<i32> {
    processes_mentioning(&format!(
        "/run/xwire/labs/{}/nodes/{node}/xwired.toml",
        lab.name
    ))
    .into_iter()
    .find(|pid| {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|exe| exe.ends_with("xwired"))
            .unwrap_or(false)
    })
}

/// The namespaces of lab `name` that exist.
pub fn namespaces_of(name: &str) -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n == &format!("xl.{name}") || n.starts_with(&format!("xl.{name}.")))
        .collect()
}
