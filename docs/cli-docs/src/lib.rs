//! Man pages and shell completions of the xwire binaries, generated from their clap
//! definitions (clap_mangen, clap_complete). `cargo xtask docs` runs each binary as
//! `BIN --generate-cli-docs DIR`; the binary hands its command to `generate_if_asked`
//! before its own parser runs. The flag is read here, not declared to clap, so that it
//! stays out of the binaries' help and cannot clash with their arguments.

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

pub use clap_complete::Shell;

pub const FLAG: &str = "--generate-cli-docs";

/// The shells completions are written for.
pub const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// When the process was started as `BIN --generate-cli-docs DIR`: writes the docs of
/// `command` under DIR, prints the files written, and exits. Otherwise returns at once.
pub fn generate_if_asked(command: impl FnOnce() -> clap::Command) {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.len() != 3 || args[1] != FLAG {
        return;
    }
    let command = command();
    let name = command.get_name().to_owned();
    match write(command, Path::new(&args[2])) {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("{name}: writing its man pages and completions: {e}");
            std::process::exit(1)
        }
    }
}

/// Writes `command`'s man pages (one per command and subcommand, section 1) to
/// `dir/man`, and its completions for bash, zsh and fish to `dir/completions`; returns
/// the files written.
pub fn write(command: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let name = command.get_name().to_owned();
    let man = dir.join("man");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    clap_mangen::generate_to(command.clone(), &man)?;
    let mut written: Vec<PathBuf> = files_in(&man)?
        .into_iter()
        .filter(|f| is_page_of(f, &name))
        .collect();
    for shell in SHELLS {
        let mut command = command.clone();
        written.push(clap_complete::generate_to(
            shell,
            &mut command,
            &name,
            &completions,
        )?);
    }
    Ok(written)
}

/// Writes `command`'s completion script for `shell` to `out` (a `completion` command's
/// output, for the user's shell to source).
pub fn completion(mut command: clap::Command, shell: Shell, out: &mut dyn io::Write) {
    let name = command.get_name().to_owned();
    clap_complete::generate(shell, &mut command, name, out);
}

/// Whether `file` is a man page of the command `name` (its own, or a subcommand's).
fn is_page_of(file: &Path, name: &str) -> bool {
    file.file_name()
        .and_then(|f| f.to_str())
        .is_some_and(|f| f == format!("{name}.1") || f.starts_with(&format!("{name}-")))
}

fn files_in(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    #[test]
    fn a_page_per_command_and_a_completion_per_shell() {
        let dir = std::env::temp_dir().join(format!("xwire-cli-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let command = Command::new("demo-tool")
            .about("A tool")
            .arg(
                Arg::new("verbose")
                    .long("verbose")
                    .help("Say more")
                    .num_args(0),
            )
            .subcommand(Command::new("run").about("Runs it"));
        let written = write(command, &dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "demo-tool-run.1",
                "demo-tool.1",
                "demo-tool.bash",
                "_demo-tool",
                "demo-tool.fish"
            ]
        );
        let page = std::fs::read_to_string(dir.join("man/demo-tool.1")).unwrap();
        assert!(
            page.contains(".TH demo-tool 1") && page.contains("verbose"),
            "{page}"
        );
        let bash = std::fs::read_to_string(dir.join("completions/demo-tool.bash")).unwrap();
        assert!(bash.contains("--verbose") && bash.contains("run"), "{bash}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
