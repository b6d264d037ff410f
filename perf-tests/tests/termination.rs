//! A perf run stopped by a signal (as `timeout` stops one) takes down what it started:
//! the daemons it runs, its network namespaces and its directories, although its guards
//! never drop.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use xwire_testbed::cluster::built_beside;
use xwire_testbed::processes;

fn named(pid: u32, entries: impl Iterator<Item = String>) -> Vec<String> {
    let mark = format!("-{pid}-");
    entries
        .filter(|name| name.starts_with("xwt-") && name.contains(&mark))
        .collect()
}

fn namespaces_of(pid: u32) -> Vec<String> {
    let names = std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten();
    named(pid, names.filter_map(|e| e.file_name().into_string().ok()))
}

fn temp_dirs_of(pid: u32) -> Vec<String> {
    let names = std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten();
    named(pid, names.filter_map(|e| e.file_name().into_string().ok()))
}

#[test]
fn a_run_stopped_by_sigterm_leaves_no_daemon_namespace_or_directory() {
    let perf = PathBuf::from(env!("CARGO_BIN_EXE_xwire-perf"));
    static XWIRED: Once = Once::new();
    static PLUGIN: Once = Once::new();
    built_beside(&XWIRED, &perf, "xwire-control", "xwired");
    built_beside(&PLUGIN, &perf, "xwire-cni", "xwire");
    let mut run = Command::new(&perf)
        .args(["cni-scale", "--pods", "5000", "--bin-dir"])
        .arg(perf.parent().unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = run.id();

    // Stopped once its daemons run and it has made namespaces.
    let deadline = Instant::now() + Duration::from_secs(60);
    let started = loop {
        let below = processes::with_descendants(BTreeSet::from([pid]));
        let daemons: BTreeSet<u32> = below
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "xwired")
            })
            .collect();
        if !daemons.is_empty() && !namespaces_of(pid).is_empty() {
            break daemons;
        }
        assert!(Instant::now() < deadline, "no daemon started within 60 s");
        assert!(run.try_wait().unwrap().is_none(), "the run ended by itself");
        std::thread::sleep(Duration::from_millis(100));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = run.kill();
            panic!("the run did not end within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{stderr}");
    assert!(
        stderr.contains("SIGTERM: taking down what this run started"),
        "{stderr}"
    );
    for daemon in &started {
        assert!(processes::ended(*daemon), "xwired {daemon} still runs");
    }
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
    assert_eq!(temp_dirs_of(pid), Vec::<String>::new());
}
