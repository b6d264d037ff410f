//! `cargo xtask image`: the container image the DaemonSet runs, built offline. No base
//! image can be pulled, so the image is `FROM scratch` with the release binaries and the
//! shared libraries they load (as `ldd` lists them, with the loader), laid out at the
//! paths they are loaded from. Built with podman, then saved as an archive for
//! `kind load image-archive`. `--debug` takes the debug binaries instead: the real-node
//! tests use it, so that an image is made from what the suite just built, in seconds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::system::run;

pub const TAG: &str = "localhost/xwire:latest";
const BINARIES: [&str; 4] = ["xwired", "xwire-signer", "xwire", "xwirectl"];

/// The files `binary` loads: every path `ldd` prints (the loader included).
fn shared_libraries(binary: &Path) -> Result<BTreeSet<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("run ldd")?;
    if !out.status.success() {
        bail!(
            "ldd {}: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    Ok(text
        .lines()
        // "libz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x...)" or
        // "/lib64/ld-linux-x86-64.so.2 (0x...)"; "linux-vdso.so.1 (0x...)" has no file.
        .filter_map(|line| {
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// Copies `from` to `root` + its own absolute path, following symlinks.
fn place(root: &Path, from: &Path, at: &Path) -> Result<()> {
    let target = root.join(at.strip_prefix("/")?);
    std::fs::create_dir_all(target.parent().context("a file in a directory")?)?;
    std::fs::copy(from, &target).with_context(|| format!("copy {}", from.display()))?;
    Ok(())
}

pub fn image(save: Option<PathBuf>, debug: bool) -> Result<()> {
    let (profile_args, profile_dir): (&[&str], _) = if debug {
        (&[], "target/debug")
    } else {
        (&["--release"], "target/release")
    };
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .arg("build")
            .args(profile_args)
            .args(["-p", "xwire-control", "-p", "xwire-cni", "-p", "xwire-lab"]),
    )?;
    let context = PathBuf::from("target/image");
    let _ = std::fs::remove_dir_all(&context);
    let root = context.join("rootfs");
    let mut libraries = BTreeSet::new();
    for name in BINARIES {
        let binary = PathBuf::from(profile_dir).join(name);
        place(&root, &binary, &Path::new("/usr/local/bin").join(name))?;
        libraries.extend(shared_libraries(&binary)?);
    }
    for library in &libraries {
        place(&root, library, library)?;
    }
    // The directories the daemon writes to when they are not mounted.
    for dir in ["run/xwire", "var/lib/xwire", "var/log/xwire", "tmp"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    std::fs::write(
        context.join("Containerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/usr/local/bin/xwired\"]\n",
    )?;
    run(Command::new("podman")
        .args(["build", "--network=none", "-t", TAG, "-f"])
        .arg(context.join("Containerfile"))
        .arg(&context))?;
    let archive = save.unwrap_or_else(|| PathBuf::from("target/xwire-image.tar"));
    let _ = std::fs::remove_file(&archive);
    run(Command::new("podman")
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg(TAG))?;
    println!(
        "image {TAG}: {} binaries, {} shared libraries; saved to {} (kind load image-archive {})",
        BINARIES.len(),
        libraries.len(),
        archive.display(),
        archive.display()
    );
    Ok(())
}
