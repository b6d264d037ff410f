//! The outside programs a scenario drives (iperf3, dpdk-testpmd, Open vSwitch), checked
//! before the first measurement so that a fresh machine gets them installed, or a clear
//! line naming the package, instead of a failure half an hour into a run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// A program a scenario runs and the Debian packages that provide it (with the
/// libraries it loads at run time, such as testpmd's AF_XDP driver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tool {
    pub program: &'static str,
    pub packages: &'static [&'static str],
}

pub const IPERF3: Tool = Tool {
    program: "iperf3",
    packages: &["iperf3"],
};

pub const TESTPMD: Tool = Tool {
    program: "dpdk-testpmd",
    // Debian ships the program in dpdk-dev ("basic tools"), not in dpdk.
    packages: &[
        "dpdk-dev",
        "librte-net-af-xdp23",
        "librte-mempool-ring23",
        "librte-mempool23",
    ],
};

pub const OVS: Tool = Tool {
    program: "ovs-vswitchd",
    packages: &["openvswitch-switch", "openvswitch-common"],
};

/// Where `program` is on PATH (or the sbin directories a root shell has), if anywhere.
pub fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The tools of `needed` that are missing.
pub fn missing(needed: &[Tool]) -> Vec<Tool> {
    let mut out: Vec<Tool> = needed
        .iter()
        .copied()
        .filter(|t| find(t.program).is_none())
        .collect();
    out.dedup();
    out
}

/// Makes sure every tool of `needed` is there. With `install`, missing ones are
/// installed with apt-get (as `shared/anchors/00-install.sh` does); without it, or when
/// apt-get is absent or fails, the error names the packages to install.
pub fn ensure(needed: &[Tool], install: bool) -> Result<()> {
    let absent = missing(needed);
    if absent.is_empty() {
        return Ok(());
    }
    let packages: Vec<&str> = absent
        .iter()
        .flat_map(|t| t.packages.iter().copied())
        .collect();
    let programs: Vec<&str> = absent.iter().map(|t| t.program).collect();
    let hint = format!(
        "{} not found; install with: apt-get install {}",
        programs.join(", "),
        packages.join(" ")
    );
    if !install || find("apt-get").is_none() {
        bail!("{hint} (or leave out the rows that need them)");
    }
    eprintln!(
        "installing {} for {}",
        packages.join(" "),
        programs.join(", ")
    );
    // apt-get and dpkg write their progress to standard output, which is this program's
    // table or JSON: it goes to standard error with the rest of the chatter.
    let status = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq"])
        .arg("--no-install-recommends")
        .args(&packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(std::process::Stdio::from(std::io::stderr()))
        .status()
        .context("run apt-get")?;
    let still = missing(needed);
    if !status.success() || !still.is_empty() {
        bail!("{hint} (apt-get exited with {status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_on_path_is_found_and_a_made_up_one_is_named_with_its_package() {
        assert!(find("sh").is_some());
        let made_up = Tool {
            program: "xwire-no-such-tool",
            packages: &["xwire-no-such-package"],
        };
        assert_eq!(missing(&[made_up, made_up]), vec![made_up]);
        let err = ensure(&[made_up], false).unwrap_err().to_string();
        assert!(err.contains("xwire-no-such-tool not found"), "{err}");
        assert!(
            err.contains("apt-get install xwire-no-such-package"),
            "{err}"
        );
        ensure(&[], false).unwrap();
    }
}
