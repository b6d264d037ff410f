//! Checks of a binary's command line, for its own tests.

/// Every argument and option of `command` and of its subcommands, at any depth, that has
/// no help text, as "SUBCOMMAND PATH: ARGUMENT" lines (`--help` and `--version` aside).
pub(crate) fn undocumented(command: &clap::Command) -> Vec<String> {
    let mut missing = Vec::new();
    collect(command, command.get_name(), &mut missing);
    missing
}

fn collect(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" || arg.is_hide_set() {
            continue;
        }
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            missing.push(format!("{path}: {id}"));
        }
    }
    for sub in command.get_subcommands() {
        if sub.is_hide_set() {
            continue;
        }
        collect(sub, &format!("{path} {}", sub.get_name()), missing);
    }
}

/// The first line `--version` prints, with the binary's own name.
pub(crate) fn version_line(command: &clap::Command) -> String {
    command.clone().render_version().trim().to_owned()
}

/// Fails (for a test) when an argument of `command` has no help text, or when its
/// `--version` does not begin with `binary`.
pub fn assert_explains_itself(command: &clap::Command, binary: &str) {
    assert_eq!(
        undocumented(command),
        Vec::<String>::new(),
        "arguments without help"
    );
    let version = version_line(command);
    assert!(version.starts_with(&format!("{binary} ")), "{version}");
    assert_documents_itself(command, binary);
}

/// What `cargo xtask docs` writes for `command`: a man page for it and for each visible
/// subcommand, naming its options, and completions that offer the subcommands.
fn assert_documents_itself(command: &clap::Command, binary: &str) {
    let dir = crate::cluster::TempDir::new(&format!("docs-{binary}"));
    let written = xwire_cli_docs::write(command.clone(), &dir.0).expect("write the docs");
    let page = std::fs::read_to_string(dir.0.join("man").join(format!("{binary}.1"))).unwrap();
    assert!(page.contains(&format!(".TH {binary} 1")), "{page}");
    let bash =
        std::fs::read_to_string(dir.0.join("completions").join(format!("{binary}.bash"))).unwrap();
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{binary}-{}.1", sub.get_name());
        assert!(
            written.iter().any(|f| f.ends_with(&name)),
            "no man page {name} in {written:?}"
        );
        assert!(
            bash.contains(sub.get_name()),
            "{} not completed",
            sub.get_name()
        );
    }
}
