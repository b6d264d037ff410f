//! The daemon as a process: its socket's mode, and a bad configuration refused at start
//! with the field and line named.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use support::{start_node, xwired, TempDir};

#[test]
fn the_local_api_socket_is_private() {
    let node = start_node("n1", "");
    let mode = std::fs::metadata(&node.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_bad_configuration_stops_the_start_and_says_where() {
    let dir = TempDir::new("badconf");
    let config = dir.0.join("xwired.toml");
    for (text, expect) in [
        (
            "node_name = \"n1\"\nbusy_pol = true\n",
            ["busy_pol", "line 2"],
        ),
        (
            "node_name = \"n1\"\n\nunderlay_mtu = \"big\"\n",
            ["underlay_mtu", "line 3"],
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(xwired())
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        for word in expect {
            assert!(stderr.contains(word), "{word} not in: {stderr}");
        }
    }
}

#[test]
fn a_store_that_cannot_be_read_stops_the_start_and_is_left_alone() {
    let dir = TempDir::new("badstore");
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let store = state.join("xwire.redb");
    let config = dir.0.join("xwired.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"n1\"\nstate_dir = \"{}\"\napi_socket = \"{}\"\n",
            state.display(),
            dir.0.join("api.sock").display()
        ),
    )
    .unwrap();
    let start = || {
        let out = Command::new(xwired())
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success(), "the daemon started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let garbage = b"not a redb file, whatever it once was".repeat(200);
    std::fs::write(&store, &garbage).unwrap();
    let stderr = start();
    assert!(stderr.contains("xwire.redb"), "{stderr}");
    assert_eq!(std::fs::read(&store).unwrap(), garbage);

    // A store the daemon made, then locked away from it.
    std::fs::remove_file(&store).unwrap();
    let mut node = support::Node::start_in(
        &xwired(),
        xwire_testbed::Netns::new("badstore").unwrap(),
        "n1",
        "",
    );
    let made = node.dir.0.join("state").join("xwire.redb");
    node.stop();
    std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o000)).unwrap();
    let before = std::fs::read(&made).unwrap();
    let out = Command::new(xwired())
        .arg("--config")
        .arg(&node.config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("mode is 000"), "{stderr}");
    assert_eq!(std::fs::read(&made).unwrap(), before);
}

/// A configuration for node n1 with its state and socket in `dir`: (config, socket).
fn write_config(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let socket = dir.0.join("api.sock");
    let config = dir.0.join("xwired.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"n1\"\nstate_dir = \"{}\"\napi_socket = \"{}\"\n",
            dir.0.join("state").display(),
            socket.display()
        ),
    )
    .unwrap();
    (config, socket)
}

/// Runs `command` under strace (with umask 000, so that only an explicit mode keeps a
/// file private) and returns the trace of the file and socket calls.
fn traced(command: &str, label: &str) -> String {
    let dir = TempDir::new(label);
    let log = dir.0.join("trace");
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask 000; exec strace -f -o {} -e trace=openat,creat,chmod,fchmod,fchmodat,bind,rename {command}",
            log.display()
        ))
        .status()
        .expect("run strace (Debian package strace)");
    assert!(status.success(), "{command}");
    std::fs::read_to_string(log).unwrap()
}

#[test]
fn keys_and_the_api_socket_are_created_with_their_final_mode() {
    let out = TempDir::new("certs");
    let trace = traced(
        &format!(
            "{} certs --out {} n1 n2",
            support::xwirectl_bin().display(),
            out.0.display()
        ),
        "certs-trace",
    );
    for node in ["n1", "n2"] {
        let key = out.0.join(format!("{node}.key"));
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{node}.key");
        let created: Vec<&str> = trace
            .lines()
            .filter(|l| l.contains(&format!("{node}.key")) && l.contains("O_CREAT"))
            .collect();
        assert!(!created.is_empty(), "{trace}");
        for line in created {
            assert!(line.contains("0600"), "created with another mode: {line}");
        }
        assert!(
            !trace
                .lines()
                .any(|l| l.contains("chmod") && l.contains(&format!("{node}.key"))),
            "a key's mode was changed after its creation:\n{trace}"
        );
    }

    // The daemon, stopped once its socket is there: the socket is created private (fchmod
    // on the socket before bind), never chmod'ed.
    let dir = TempDir::new("sockmode");
    let (config, socket) = write_config(&dir);
    let script = dir.0.join("run.sh");
    std::fs::write(
        &script,
        format!(
            "{} --config {} & pid=$!\nfor i in $(seq 200); do [ -S {} ] && break; sleep 0.05; done\nkill $pid; wait $pid; exit 0\n",
            xwired().display(),
            config.display(),
            socket.display()
        ),
    )
    .unwrap();
    let trace = traced(&format!("sh {}", script.display()), "sock-trace");
    let fchmod = trace
        .lines()
        .position(|l| l.contains("fchmod(") && l.contains("0600"))
        .unwrap_or_else(|| panic!("no fchmod before bind:\n{trace}"));
    let bind = trace
        .lines()
        .position(|l| l.contains("bind(") && l.contains("api.sock"))
        .unwrap_or_else(|| panic!("no bind:\n{trace}"));
    assert!(fchmod < bind, "{trace}");
    assert!(
        !trace
            .lines()
            .any(|l| l.contains("chmod(") && l.contains("api.sock")),
        "the socket's mode was changed after bind:\n{trace}"
    );
}

#[test]
fn certs_refuses_names_that_are_not_dns_names_and_writes_nothing() {
    for bad in ["*", "a/b", "../n1", "N1", "*.lab"] {
        let out = TempDir::new("badcerts");
        let run = Command::new(support::xwirectl_bin())
            .args(["certs", "--out"])
            .arg(&out.0)
            .args(["n1", bad])
            .output()
            .unwrap();
        assert!(!run.status.success(), "{bad}");
        assert!(
            String::from_utf8_lossy(&run.stderr).contains("DNS name"),
            "{bad}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert_eq!(std::fs::read_dir(&out.0).unwrap().count(), 0, "{bad}");
    }
}

#[test]
fn a_file_at_the_socket_path_is_refused_and_left_alone() {
    let dir = TempDir::new("notsock");
    let (config, socket) = write_config(&dir);
    std::fs::write(&socket, "someone's data").unwrap();
    let out = Command::new(xwired())
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "someone's data");
}

/// The daemon's stderr when started with `env`, asked for its state once, and stopped.
fn logs_with(label: &str, env: &[(&str, &str)]) -> String {
    use std::os::unix::process::ExitStatusExt;
    let dir = TempDir::new(label);
    let (config, socket) = write_config(&dir);
    let mut command = Command::new(xwired());
    command
        .arg("--config")
        .arg(&config)
        .env_remove("XWIRE_LOG")
        .env_remove("RUST_LOG")
        .stderr(std::process::Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().unwrap();
    let asked = support::eventually(std::time::Duration::from_secs(10), || {
        xwire_api_client::call(
            &socket,
            &xwire_proto::local::Request::State,
            std::time::Duration::from_secs(2),
        )
        .is_ok()
    });
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let out = child.wait_with_output().unwrap();
    assert!(asked, "the daemon did not answer");
    assert!(
        out.status.success() || out.status.signal().is_some(),
        "{out:?}"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn xwire_log_or_else_rust_log_filters_the_daemons_lines() {
    let default = logs_with("logdefault", &[]);
    assert!(default.contains("xwired ready"), "{default}");
    assert!(!default.contains("DEBUG"), "{default}");

    let debug = logs_with("logdebug", &[("XWIRE_LOG", "debug")]);
    assert!(
        debug.lines().any(|l| l.contains("DEBUG")
            && l.contains("local API request")
            && l.contains("kind=\"state\"")),
        "{debug}"
    );
    let rust_log = logs_with("logrust", &[("RUST_LOG", "debug")]);
    assert!(rust_log.contains("local API request"), "{rust_log}");
    // XWIRE_LOG wins over RUST_LOG.
    let quiet = logs_with("logwarn", &[("XWIRE_LOG", "warn"), ("RUST_LOG", "debug")]);
    assert!(
        !quiet.contains("xwired ready") && !quiet.contains("DEBUG"),
        "{quiet}"
    );
    // A filter that does not parse is said, and the default applies.
    let typo = logs_with("logtypo", &[("XWIRE_LOG", "xwire=loud")]);
    assert!(typo.contains("is not a log filter"), "{typo}");
    assert!(typo.contains("xwired ready"), "{typo}");
}
