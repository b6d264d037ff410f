//! `cargo xtask docs [DIR]`: man pages and shell completions (bash, zsh, fish) of
//! xwirectl, xwired, xwire-signer, xwire-pktgen and xwire-perf, generated from their own
//! command-line definitions, under DIR (default `target/cli-docs`): `man/` and
//! `completions/`.

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::system::run;

/// Each binary, and the package it is in.
const BINARIES: [(&str, &str); 5] = [
    ("xwire-lab", "xwirectl"),
    ("xwire-control", "xwired"),
    ("xwire-control", "xwire-signer"),
    ("xwire-bench", "xwire-pktgen"),
    ("xwire-perf", "xwire-perf"),
];

pub fn docs(dir: Option<PathBuf>) -> Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from("target/cli-docs"));
    let mut build = crate::cargo();
    build.args(["build", "--quiet"]);
    for (package, binary) in BINARIES {
        build.args(["-p", package, "--bin", binary]);
    }
    run(&mut build)?;
    std::fs::create_dir_all(&dir)?;
    let dir = std::fs::canonicalize(&dir)?;
    for (_, binary) in BINARIES {
        run(std::process::Command::new(format!("target/debug/{binary}"))
            .arg("--generate-cli-docs")
            .arg(&dir))
        .with_context(|| format!("the docs of {binary}"))?;
    }
    println!(
        "\nman pages in {0}/man (man -l {0}/man/xwirectl-lab-up.1; to install, copy them to \
         /usr/local/share/man/man1), completions in {0}/completions (bash: source \
         {0}/completions/xwirectl.bash)",
        dir.display()
    );
    Ok(())
}
