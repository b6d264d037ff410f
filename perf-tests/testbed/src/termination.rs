//! A run ended by a signal (`timeout`'s SIGTERM, Ctrl-C, a closed terminal) exits without
//! dropping its guards: the daemons, the API server and etcd it started would run on, and
//! its namespaces and directories stay. `clean_up_on_termination` catches those signals
//! and takes it all down before exiting. For long runs (the perf scenarios); tests are
//! ended by the harness, and their namespaces swept by the next test process.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SigSet, Signal};

use crate::{names, processes};

static TERMINATING: AtomicBool = AtomicBool::new(false);

/// Parks the calling thread for good while a signal's clean-up runs, which ends the
/// process with the signal's status: `main` calls it before it returns, so that a run
/// whose daemons the clean-up killed does not exit first with an error of its own.
pub fn park_if_terminating() {
    if TERMINATING.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Call first in `main`, before any other thread starts: the signals are blocked in
/// every thread but one, which waits for them. (Spawned programs start with an empty
/// mask: std resets it.) A thread that panics during the clean-up (its daemon was just
/// killed) is parked too, silently.
pub fn clean_up_on_termination() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        park_if_terminating();
        report(info);
    }));
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(signal);
    }
    if signals.thread_block().is_err() {
        return;
    }
    std::thread::spawn(move || {
        let Ok(signal) = signals.wait() else {
            return;
        };
        TERMINATING.store(true, Ordering::SeqCst);
        eprintln!("{signal}: taking down what this run started");
        let own = std::process::id();
        // The run's other threads go on meanwhile and may start more: each step is
        // taken until a pass finds nothing, the children last again.
        let kill_children = || {
            for _ in 0..20 {
                let children: BTreeSet<u32> = processes::with_descendants(BTreeSet::from([own]))
                    .into_iter()
                    .filter(|pid| *pid != own)
                    .collect();
                if children.is_empty() {
                    return;
                }
                processes::kill(&children);
            }
        };
        kill_children();
        crate::netns::remove_namespaces_of(own);
        names::remove_temp_dirs_of(own);
        kill_children();
        std::process::exit(128 + signal as i32);
    });
}
