//! Where a CNI call's time goes, by step (netlink, fast-path ports, the store, peer
//! messages...), for the `xwire_cni_call_step_duration_seconds` histograms.
//!
//! The node answers calls on one thread, so the recorder is that thread's: code anywhere
//! below a call wraps a step in `time`, without a recorder passed down through every
//! function. Steps nest; each records only its own time (a step's children are taken
//! out of it), so a call's steps add up to no more than the call.

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// The steps a call is broken into. Each is timed where it happens.
pub(crate) const NETLINK: &str = "netlink";
/// A DEL's deletion of all of the pod's interfaces at once.
pub(crate) const NETLINK_POD_INTERFACES: &str = "netlink_pod_interfaces";
pub(crate) const ROUTING: &str = "routing";
/// Opening AF_XDP (or AF_PACKET) sockets and attaching XDP, waited for on the worker.
pub(crate) const PORT_OPEN: &str = "port_open";
pub(crate) const PORT_CLOSE: &str = "port_close";
pub(crate) const STORE_READ: &str = "store_read";
pub(crate) const STORE_WRITE: &str = "store_write";
/// Writing the call's changes out (the embedded store's transaction, a server's requests).
pub(crate) const STORE_COMMIT: &str = "store_commit";
pub(crate) const PEER_MESSAGES: &str = "peer_messages";
pub(crate) const STEPS: [&str; 9] = [
    NETLINK,
    NETLINK_POD_INTERFACES,
    ROUTING,
    PORT_OPEN,
    PORT_CLOSE,
    STORE_READ,
    STORE_WRITE,
    STORE_COMMIT,
    PEER_MESSAGES,
];

#[derive(Default)]
struct Recorder {
    /// Time of each step so far, in the order first seen (a handful: a Vec beats a map).
    totals: Vec<(&'static str, Duration)>,
    /// For each step under way, the time its finished children took.
    children: Vec<Duration>,
}

thread_local! {
    static RECORDER: RefCell<Recorder> = RefCell::new(Recorder::default());
}

/// Runs `f` as the step `step` of the call under way on this thread.
pub fn time<T>(step: &'static str, f: impl FnOnce() -> T) -> T {
    RECORDER.with(|r| r.borrow_mut().children.push(Duration::ZERO));
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    RECORDER.with(|r| {
        let mut r = r.borrow_mut();
        let children = r.children.pop().unwrap_or_default();
        if let Some(parent) = r.children.last_mut() {
            *parent += took;
        }
        add(&mut r.totals, step, took.saturating_sub(children));
    });
    out
}

/// Records `took` as (more of) the step `step`, measured by the caller.
#[cfg(test)]
pub(crate) fn record(step: &'static str, took: Duration) {
    RECORDER.with(|r| add(&mut r.borrow_mut().totals, step, took));
}

/// The steps recorded on this thread since the last call, which starts afresh.
pub fn take() -> Vec<(&'static str, Duration)> {
    RECORDER.with(|r| std::mem::take(&mut r.borrow_mut().totals))
}

fn add(totals: &mut Vec<(&'static str, Duration)>, step: &'static str, took: Duration) {
    match totals.iter_mut().find(|(s, _)| *s == step) {
        Some((_, total)) => *total += took,
        None => totals.push((step, took)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_steps_take_their_time_out_of_the_outer_one() {
        take();
        time("outer", || {
            std::thread::sleep(Duration::from_millis(20));
            time("inner", || std::thread::sleep(Duration::from_millis(30)));
            time("inner", || std::thread::sleep(Duration::from_millis(10)));
        });
        let steps = take();
        let of = |name| steps.iter().find(|(s, _)| *s == name).map(|(_, d)| *d);
        let (outer, inner) = (of("outer").unwrap(), of("inner").unwrap());
        assert!(inner >= Duration::from_millis(40), "{inner:?}");
        assert!(outer >= Duration::from_millis(20), "{outer:?}");
        assert!(
            outer < Duration::from_millis(40),
            "the inner steps were left in: {outer:?}"
        );
        assert!(take().is_empty(), "take starts afresh");
    }

    #[test]
    fn recorded_times_add_up_under_one_step() {
        take();
        record("queue", Duration::from_millis(3));
        record("queue", Duration::from_millis(4));
        assert_eq!(take(), vec![("queue", Duration::from_millis(7))]);
    }
}
