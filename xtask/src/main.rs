//! `cargo xtask demo` (the main job) and `cargo xtask test` (every check CI runs);
//! `cargo xtask image [ARCHIVE]` builds the container image the DaemonSet runs;
//! `cargo xtask docs [DIR]` writes the binaries' man pages and shell completions.
//! Both install the Debian packages they need first when they run as root, and otherwise
//! say what to install.

#![forbid(unsafe_code)]

mod demo;
mod docs;
mod image;
mod libtest;
mod system;

use std::process::{Command, ExitCode};

use anyhow::{bail, Result};

use libtest::run_tests;
use system::{ensure_packages, ensure_root, run, Need};

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "demo" => demo(),
        "test" => test(),
        "image" => image::image(std::env::args().nth(2).map(Into::into)),
        "docs" => ensure_packages(Need::Build)
            .and_then(|()| docs::docs(std::env::args().nth(2).map(Into::into))),
        _ => {
            eprintln!("usage: cargo xtask demo | test | image [ARCHIVE] | docs [DIR]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn demo() -> Result<()> {
    ensure_packages(Need::Demo)?;
    ensure_root("the demo makes network namespaces")?;
    demo::demo()
}

fn test() -> Result<()> {
    ensure_packages(Need::Test)?;
    ensure_root("the tests make network namespaces and veth pairs")?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    check_fuzz_targets()?;
    // --all-targets also runs each criterion bench once, as a smoke test; doc tests
    // need a run of their own.
    // Tests that cannot run here (no kube-apiserver, say) leave their reason in this
    // directory: they are counted as skipped, not passed.
    let skips = std::path::Path::new("target/test-skips");
    let _ = std::fs::remove_dir_all(skips);
    std::fs::create_dir_all(skips)?;
    let skip_dir = std::fs::canonicalize(skips)?;
    let mut totals = run_tests(
        cargo()
            // Every test binary runs even after one fails, so that one run shows every
            // failure.
            .args(["test", "--workspace", "--all-targets", "--no-fail-fast"])
            .env("XWIRE_SKIP_DIR", &skip_dir),
        Some(&skip_dir),
    )?;
    totals.add(run_tests(
        cargo().args(["test", "--workspace", "--doc"]),
        None,
    )?);
    println!(
        "tests: {} passed, {} failed, {} skipped",
        totals.passed, totals.failed, totals.ignored
    );
    if totals.failed > 0 || totals.passed == 0 {
        bail!("the tests did not pass");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The fuzz targets are crates of their own, outside the workspace (cargo-fuzz builds them
/// apart, with sanitizers), so the workspace's build never sees them: one of them had
/// stopped compiling after a signature it calls changed. Each fuzz crate the repository
/// holds is checked here, all in one target directory of their own.
fn check_fuzz_targets() -> Result<()> {
    let listed = Command::new("git")
        .args(["ls-files", "--", "*fuzz/Cargo.toml"])
        .output()?;
    if !listed.status.success() {
        bail!("git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    }
    let manifests = String::from_utf8(listed.stdout)?;
    if manifests.lines().count() == 0 {
        bail!("git ls-files found no fuzz crate");
    }
    for manifest in manifests.lines() {
        run(cargo()
            .args(["check", "--bins", "--manifest-path", manifest])
            .env("CARGO_TARGET_DIR", "target/fuzz-check"))?;
    }
    Ok(())
}
