//! A worker held off its core is seen to be away from its ports: a real-time thread
//! pinned to the worker's core takes it for 60 ms, as the kernel's own threads took a
//! shared core for up to 9 ms in issue 36's runs (where a pod port's fill ring then ran
//! empty). A busy worker counts the absence; a worker with nothing to do, asleep while
//! it lasts, does not. And an ordinary thread that spins on the worker's core (a build
//! beside a lab) no longer holds it off: the worker, at its default nice value, loses no
//! frame to it, nor to ports removed and added, or pairs steered and put back, beside
//! the busy one. The tests count absences and frames; they never time the worker's work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use std::fs::File;
use std::os::fd::OwnedFd;
use xwire_fastpath::stats::AwayTimes;

use xwire_fastpath::{Direction, PortChoice, SteeredEnd, Worker, WorkerConfig};
use xwire_model::worker_defaults::DEFAULT_WORKER_NICE;
use xwire_proto::WireId;
use xwire_testbed::checks::test_frame;
use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

mod switch_bed;
use switch_bed::{link_on, Bed, Linked};

const HELD: Duration = Duration::from_millis(60);

/// One test at a time takes the core: another's worker must not be held by it.
static CORE: Mutex<()> = Mutex::new(());

/// The last core: the worker's, and the thread's that takes it.
fn shared_core() -> usize {
    core_affinity::get_core_ids()
        .and_then(|ids| ids.last().map(|id| id.id))
        .unwrap_or(0)
}

/// Takes `core` for `HELD` from every ordinary thread pinned to it, whatever its nice
/// value: a thread of the real-time class (`SCHED_FIFO`) runs before them until it is done.
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
    // Up to three holds: in one full suite of five (issue 36, stop 64) the worker ran
    // through a whole hold (its longest absence 1.3 ms), for a reason not found; the
    // kernel's reserve for ordinary threads is a guess. A worker that does not count
    // its absences fails all three.
    let mut after = before;
    for _ in 0..3 {
        hold_core(core);
        after = away_after_a_pass(&worker);
        if after.longest >= HELD * 3 / 4 {
            break;
        }
    }
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

/// Frames pod a sends per millisecond below: 48k a second. A port of 128 frames holds 92
/// in its fill ring, under 2 ms of them, and a scheduler slice of an ordinary thread is
/// longer than that.
const PER_MS: u64 = 48;

/// Spins on `core` as an ordinary thread until `stop`.
fn spin_on(core: usize, stop: &AtomicBool) {
    assert!(core_affinity::set_for_current(core_affinity::CoreId {
        id: core
    }));
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// Issue 36's fill-ring drops at low rates: a worker kept from its ports longer than
/// its fill ring lasts. An ordinary thread that spins on the worker's core keeps a
/// worker of equal weight waiting for its share of the core; at its defaults (nice -20,
/// a 0.1-ms slice) the worker has all but about 1% of the core and preempts the thread
/// as soon as its nap ends. At nice 0 this test lost 1,631 to 3,005 frames in five
/// runs, and at nice -20 with the kernel's slice up to 97 (`xwire_fastpath::nice`).
#[test]
fn a_worker_at_its_default_nice_value_beside_a_spinning_thread_loses_no_frame() {
    let _alone = CORE.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Bed::new("xaw-nice");
    let core = shared_core();
    let worker = small_port_worker(&bed, core, 128);
    assert_eq!(
        worker.stats().unwrap().nice,
        DEFAULT_WORKER_NICE,
        "the worker's nice value (see its log)"
    );
    let linked = link_on(&bed, worker, 1500, [PortChoice::AfXdp; 2]);
    let Counted { sent, counts, .. } = send_beside_a_spinner(&bed, &linked, core, || {});
    let (forwarded, switch_drops, kernel_drops) = counts;
    assert!(
        forwarded + kernel_drops == sent && switch_drops == 0 && kernel_drops <= STOLEN_CPU_SLACK,
        "{sent} frames sent: forwarded, dropped by the switch, dropped by the kernel at port a \
         {counts:?} (at most {STOLEN_CPU_SLACK} kernel drops allowed)"
    );
}

/// Frames the kernel may drop at port a above without the worker's nice value being at
/// fault. On a virtual machine the host takes a vCPU away now and then (the guest's steal
/// time: 20 to 60 ms over this test's 1.7 s on the development machine), and one stretch
/// of over 2 ms empties the fill ring whatever the worker's priority: 2 of 5 runs on an
/// idle machine lost 4 to 61 frames that way. At nice 0 the test lost 1,631 to 3,005.
const STOLEN_CPU_SLACK: u64 = 200;

/// Removing ports (a pod's DEL) while another port carries traffic: closing an AF_XDP
/// socket waits out an RCU grace period, and taking the program off a veth waits for
/// the interface's lock. Done in the worker, each removal held it off its ports for 5 to
/// 15 ms, and the busy port beside lost frames to `rx_fill_ring_empty`: 330 to 1,054 of
/// about 50,000 in this test. The keeper does both now. The port has 256 frames (about
/// 4 ms of them in its fill ring) and the test starts once the kernel has had a second
/// to finish taking the earlier tests' namespaces down: with 128 frames and no pause,
/// the unoptimised build in the suite lost 26 frames once with the change. The spinning
/// thread keeps the worker's core from going idle: on a virtual machine an idle core can
/// take over a millisecond to run the worker again when its nap ends, which would drop
/// frames from a small port with or without removals.
#[test]
fn removing_ports_beside_a_busy_port_loses_none_of_its_frames() {
    let _alone = alone_after_a_pause();
    assert_none_lost(|| {
        let bed = Bed::new("xaw-del");
        let core = shared_core();
        let worker = small_port_worker(&bed, core, 256);
        let linked = link_on(&bed, worker, 1500, [PortChoice::AfXdp; 2]);
        let others = Netns::new("xaw-del-c").unwrap();
        let ends = more_wires(&bed, &others, REMOVED);
        let ports: Vec<_> = ends
            .iter()
            .map(|end| linked.worker.add_port(end.b_name(), 1514).unwrap())
            .collect();
        send_beside_a_spinner(&bed, &linked, core, || {
            for port in &ports {
                std::thread::sleep(Duration::from_millis(100));
                linked.worker.remove_port(port.id).unwrap();
            }
        })
    });
}

/// The core to this test alone (`CORE`), once the kernel has had a second to finish
/// taking the earlier tests' namespaces down.
fn alone_after_a_pause() -> MutexGuard<'static, ()> {
    let alone = CORE.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::sleep(Duration::from_secs(1));
    alone
}

/// Ports removed one every 100 ms while pod a sends.
const REMOVED: usize = 5;

/// Adding ports while another port carries traffic, many at once as a daemon's restart
/// or a lab's bring-up asks for them. Opening an AF_XDP port pins and zeroes its UMEM,
/// binds the socket and attaches the program to the veth, all waiting in the kernel.
/// Done in the worker, 120 opens at once cost the busy 256-frame port beside them 20, 20
/// and 46 frames (`rx_fill_ring_empty`) in three runs; 60 opens beside a 128-frame port,
/// 76 to 176. The keeper opens the ports and makes their slots now, and the worker only
/// puts them in place: no frame lost in three optimised and three unoptimised runs.
/// Putting them in place must not allocate either: while the keeper maps a UMEM, a
/// page fault in the worker waited 0.1 to 3.4 ms for the process's memory map (see
/// `touched_slots`). The port has 256 frames because with 128 the unoptimised build lost
/// 100 frames once in the full suite, where the kernel may still be taking the earlier
/// tests' namespaces down. As in the removal test, an ordinary thread spins on the
/// worker's core, and the callers (woken by the worker's answers) run on the other core.
#[test]
fn adding_ports_beside_a_busy_port_loses_none_of_its_frames() {
    let _alone = alone_after_a_pause();
    assert_none_lost(|| {
        let bed = Bed::new("xaw-add");
        let core = shared_core();
        let worker = bed.worker_with(WorkerConfig {
            max_ports: ADDED + 2,
            ..small_port_config(core, 256)
        });
        let linked = link_on(&bed, worker, 1500, [PortChoice::AfXdp; 2]);
        let others = Netns::new("xaw-add-c").unwrap();
        let ends = more_wires(&bed, &others, ADDED);
        send_beside_a_spinner(&bed, &linked, core, || {
            std::thread::sleep(Duration::from_millis(200));
            std::thread::scope(|s| {
                for end in &ends {
                    s.spawn(|| {
                        if let Some(other) = other_core(core) {
                            core_affinity::set_for_current(core_affinity::CoreId { id: other });
                        }
                        linked.worker.add_port(end.b_name(), 1514).unwrap()
                    });
                }
            });
        })
    });
}

/// Ports added at once while pod a sends.
const ADDED: usize = 120;

/// Steering same-node pairs through the worker and putting them back while another port
/// carries traffic (a lab that impairs or captures a same-node wire, then clears it).
/// Each pair opens four sockets, gives two veths a second queue, loads and attaches two
/// programs, and later takes them off and closes the sockets, all waiting in the kernel.
/// Done in the worker, steering took it 18 to 22 ms a pair and putting back 62 to 70 (the
/// drain waited its whole limit, as the busy port never let a pass move nothing), and the
/// busy port lost 15,872 to 16,335 of about 60,000 frames in four runs. The keeper does
/// that work now, and the drain waits only for the pair's own rings.
#[test]
fn steering_pairs_beside_a_busy_port_loses_none_of_its_frames() {
    let _alone = alone_after_a_pause();
    assert_none_lost(|| {
        let bed = Bed::new("xaw-str");
        let core = shared_core();
        let worker = small_port_worker(&bed, core, 256);
        let linked = link_on(&bed, worker, 1500, [PortChoice::AfXdp; 2]);
        let pods = [
            Netns::new("xaw-str-c").unwrap(),
            Netns::new("xaw-str-d").unwrap(),
        ];
        let pairs: Vec<Veth> = (0..STEERED)
            .map(|_| {
                let veth =
                    Veth::named(&pods[0], &unique_ifname(), &pods[1], &unique_ifname()).unwrap();
                veth.set_up().unwrap();
                veth
            })
            .collect();
        send_beside_a_spinner(&bed, &linked, core, || {
            if let Some(other) = other_core(core) {
                core_affinity::set_for_current(core_affinity::CoreId { id: other });
            }
            for (n, pair) in pairs.iter().enumerate() {
                std::thread::sleep(Duration::from_millis(50));
                let ends = [pair.a_ns(), pair.b_ns()].map(|ns| ns.path());
                let ends =
                    [(ends[0], pair.a_name()), (ends[1], pair.b_name())].map(|(path, ifname)| {
                        SteeredEnd {
                            netns: OwnedFd::from(File::open(path).unwrap()),
                            ifname: ifname.into(),
                        }
                    });
                let steered = linked
                    .worker
                    .steer_pair(WireId(100 + n as u64), ends, 1514)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(50));
                let [p, q] = &steered.ports;
                linked.worker.remove_ports(&[p.id, q.id]).unwrap();
            }
        })
    });
}

/// Pairs steered and put back, one after another, while pod a sends.
const STEERED: usize = 6;

/// `count` veth pairs from `others` to the node, up, for ports beside the busy one.
fn more_wires<'a>(bed: &'a Bed, others: &'a Netns, count: usize) -> Vec<Veth<'a>> {
    (0..count)
        .map(|_| {
            let veth = Veth::named(others, &unique_ifname(), &bed.node, &unique_ifname()).unwrap();
            veth.set_up().unwrap();
            veth
        })
        .collect()
}

/// A worker on `core` whose ports never grow from `frames` (128: 92 of them in the fill
/// ring, under 2 ms at `PER_MS`).
fn small_port_worker(bed: &Bed, core: usize, frames: usize) -> Worker {
    bed.worker_with(small_port_config(core, frames))
}

fn small_port_config(core: usize, frames: usize) -> WorkerConfig {
    WorkerConfig {
        core: Some(core),
        frames_per_port: frames,
        min_frames_per_port: frames,
        resting_frames_per_worker: 0,
        ..WorkerConfig::default()
    }
}

/// A core other than `core`, if the machine has one.
fn other_core(core: usize) -> Option<usize> {
    core_affinity::get_core_ids()
        .and_then(|ids| ids.into_iter().find(|id| id.id != core))
        .map(|id| id.id)
}

/// Sends `PER_MS` frames every millisecond for 1.5 s from pod a, from a core other than
/// `core`, while an ordinary thread spins on `core` and `during` runs beside (and must
/// end before the traffic does); then waits until every frame is forwarded or counted as
/// dropped. Returns what it counted.
fn send_beside_a_spinner(
    bed: &Bed,
    linked: &Linked,
    core: usize,
    during: impl FnOnce() + Send,
) -> Counted {
    let other = other_core(core);
    let tx = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    let stop = AtomicBool::new(false);
    let mut sent = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| spin_on(core, &stop));
        let beside = s.spawn(during);
        if let Some(other) = other {
            core_affinity::set_for_current(core_affinity::CoreId { id: other });
        }
        // The spinner has the core before the first frame.
        std::thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            for _ in 0..PER_MS {
                tx.send(&test_frame(60, 0xa, sent as u16)).unwrap();
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let in_time = beside.is_finished();
        let finished = beside.join();
        stop.store(true, Ordering::Relaxed);
        if let Err(panic) = finished {
            std::panic::resume_unwind(panic);
        }
        assert!(in_time, "what ran beside the traffic outlasted it");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let counts = loop {
        let stats = linked.worker.stats().unwrap().links.remove(0);
        let a_to_b = linked.counters.snapshot(Direction::AToB);
        let kernel = stats.kernel_drops[0].map(|d| d.total()).unwrap_or_default();
        let counts = (a_to_b.frames, a_to_b.total_drops(), kernel);
        if counts.0 + counts.1 + counts.2 >= sent || Instant::now() > deadline {
            break counts;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Counted {
        sent,
        counts,
        away: away(&linked.worker),
    }
}

/// What one run beside a spinner counted.
struct Counted {
    sent: u64,
    /// Frames forwarded, dropped by the switch, dropped by the kernel at port a.
    counts: (u64, u64, u64),
    /// The worker's absences from its ports, to say why when frames were lost.
    away: AwayTimes,
}

impl Counted {
    fn none_lost(&self) -> bool {
        self.counts == (self.sent, 0, 0)
    }
}

impl std::fmt::Display for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (forwarded, switch, kernel) = self.counts;
        write!(
            f,
            "{} sent: {forwarded} forwarded, {switch} dropped by the switch, {kernel} by the \
             kernel at port a; the worker's longest absence {:?}, absences over 1, 4, 16 ms {:?}",
            self.sent, self.away.longest, self.away.over
        )
    }
}

/// Asserts that `scenario` lost no frame, giving it a second run (after the same pause
/// as the first) when the first lost some. The work these tests keep off the worker
/// cost frames in every run (each test's comment has the counts); the machine alone
/// once cost some in one run: 164 of 55,584 in the adding test, in the unoptimised full
/// suite, with none in its next three runs alone (a virtual machine's host takes a vCPU
/// away now and then: `STOLEN_CPU_SLACK`). Both runs' figures, with the worker's
/// absences, are in the failure.
fn assert_none_lost(mut scenario: impl FnMut() -> Counted) {
    let first = scenario();
    if first.none_lost() {
        return;
    }
    eprintln!("frames lost in the first run, running it again: {first}");
    std::thread::sleep(Duration::from_secs(1));
    let second = scenario();
    assert!(
        second.none_lost(),
        "frames lost in both runs:\n first {first}\n second {second}"
    );
}
