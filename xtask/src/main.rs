//! `cargo xtask demo` (the main job) and `cargo xtask test` (every check CI runs);
//! `cargo xtask image [--debug] [ARCHIVE]` builds the container image the DaemonSet runs;
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
        "image" => {
            let rest: Vec<String> = std::env::args().skip(2).collect();
            let debug = rest.iter().any(|a| a == "--debug");
            let archive = rest.into_iter().find(|a| a != "--debug").map(Into::into);
            image::image(archive, debug)
        }
        "docs" => ensure_packages(Need::Build)
            .and_then(|()| docs::docs(std::env::args().nth(2).map(Into::into))),
        _ => {
            eprintln!("usage: cargo xtask demo | test | image [--debug] [ARCHIVE] | docs [DIR]");
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
/// stopped compiling after a signature it calls changed. Each fuzz crate (a `fuzz/`
/// folder with a Cargo.toml, in a crate's folder) is checked here, all in one target
/// directory of their own. Found by walking the tree, not by asking git: CI's checkout
/// need not be a repository.
fn check_fuzz_targets() -> Result<()> {
    let mut manifests = Vec::new();
    find_fuzz_crates(std::path::Path::new("."), 3, &mut manifests)?;
    if manifests.is_empty() {
        bail!("no fuzz crate found (a fuzz/Cargo.toml within three folders of the top)");
    }
    manifests.sort();
    for manifest in manifests {
        run(cargo()
            .args(["check", "--bins", "--manifest-path"])
            .arg(&manifest)
            .env("CARGO_TARGET_DIR", "target/fuzz-check"))?;
    }
    Ok(())
}

/// Adds `fuzz/Cargo.toml` of `dir` and of its folders, `depth` levels down, to `found`;
/// build output and hidden folders are not looked into.
fn find_fuzz_crates(
    dir: &std::path::Path,
    depth: usize,
    found: &mut Vec<std::path::PathBuf>,
) -> Result<()> {
    let manifest = dir.join("fuzz/Cargo.toml");
    if manifest.is_file() {
        found.push(manifest);
    }
    if depth == 0 {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !entry.file_type()?.is_dir() || name.starts_with('.') || name == "target" {
            continue;
        }
        find_fuzz_crates(&entry.path(), depth - 1, found)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Tests run in xtask's folder: the repository is its parent.
    #[test]
    fn every_fuzz_crate_of_the_repository_is_found() {
        let mut found = Vec::new();
        super::find_fuzz_crates(Path::new(".."), 3, &mut found).unwrap();
        found.sort();
        let expected: Vec<PathBuf> = [
            "../cni/fuzz/Cargo.toml",
            "../control/lab/fuzz/Cargo.toml",
            "../control/model/fuzz/Cargo.toml",
            "../wire-proto/fuzz/Cargo.toml",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(found, expected);
    }
}
