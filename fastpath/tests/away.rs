//! A worker held off its core is seen to be away from its ports: a real-time thread
//! pinned to the worker's core takes it for 60 ms, as the kernel's own threads took a
//! shared core for up to 9 ms in issue 36's runs (where a pod port's fill ring then ran
//! empty). A busy worker counts the absence; a worker with nothing to do, asleep while
//! it lasts, does not. The test counts absences; it never times the worker's work.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use xwire_fastpath::stats::AwayTimes;
use xwire_fastpath::{Worker, WorkerConfig};

const HELD: Duration = Duration::from_millis(60);

/// One test at a time takes the core: another's worker must not be held by it.
static CORE: Mutex<()> = Mutex::new(());

/// The last core: the worker's, and the thread's that takes it.
fn shared_core() -> usize {
    core_affinity::get_core_ids()
        .and_then(|ids| ids.last().map(|id| id.id))
        .unwrap_or(0)
}

/// Takes `core` for `HELD` from every ordinary thread pinned to it: a thread of the
/// real-time class (`SCHED_FIFO`) runs before them until it is done.
fn hold_core(core: usize) {
    std::thread::spawn(move || {
        assert!(core_affinity::set_for_current(core_affinity::CoreId {
            id: core
        }));
        let param = libc::sched_param { sched_priority: 1 };
        // SAFETY: sets the calling thread's own policy with a valid parameter.
        let set = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
        assert_eq!(set, 0, "SCHED_FIFO: {}", std::io::Error::last_os_error());
        let until = Instant::now() + HELD;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    })
    .join()
    .unwrap();
}

fn away(worker: &Worker) -> AwayTimes {
    worker.stats().unwrap().away
}

/// The worker's absences once it has passed over its ports again. An absence is counted
/// when the next pass starts, and a worker answers a command before its next pass: the
/// second answer comes after a pass that followed the first.
fn away_after_a_pass(worker: &Worker) -> AwayTimes {
    away(worker);
    away(worker)
}

#[test]
fn a_busy_worker_held_off_its_core_counts_the_absence() {
    let _alone = CORE.lock().unwrap_or_else(|e| e.into_inner());
    let core = shared_core();
    // Busy-polling: the worker never sleeps, so all of its time off the core is away.
    let worker = Worker::spawn(WorkerConfig {
        core: Some(core),
        busy_poll: true,
        ..WorkerConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let before = away(&worker);
    hold_core(core);
    let after = away_after_a_pass(&worker);
    assert!(
        after.longest >= HELD * 3 / 4,
        "the longest absence after the core was taken for {HELD:?}: {after:?}"
    );
    assert!(
        after.over[2] > before.over[2],
        "no absence over 16 ms was counted: before {before:?}, after {after:?}"
    );
}

#[test]
fn a_worker_asleep_with_nothing_to_do_is_not_away() {
    let _alone = CORE.lock().unwrap_or_else(|e| e.into_inner());
    let core = shared_core();
    // The daemon's default: with no traffic the worker sleeps until some comes.
    let worker = Worker::spawn(WorkerConfig {
        core: Some(core),
        ..WorkerConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let before = away(&worker);
    // Answering woke it: it passes over its ports a moment before it sleeps again.
    std::thread::sleep(Duration::from_millis(20));
    hold_core(core);
    let after = away_after_a_pass(&worker);
    assert_eq!(
        after.over[2], before.over[2],
        "a sleeping worker was counted away: before {before:?}, after {after:?}"
    );
}
