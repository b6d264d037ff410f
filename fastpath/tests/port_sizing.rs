//! Ports sized by their traffic, with real frames: a port opens at its resting size (the
//! floor, in a worker of many ports) and takes a first burst at it, grows while frames
//! flow (its fill ring then holds the burst of a generator catching up, which a port of
//! 256 frames dropped as `rx_fill_ring_empty`), loses nothing uncounted while it is
//! reopened larger, and gives its frames back once the traffic stops. The tests count
//! frames; they never time them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use xwire_fastpath::stats::LinkStats;
use xwire_fastpath::{Direction, PortChoice, Worker, WorkerConfig};
use xwire_testbed::checks::test_frame;
use xwire_testbed::RawSocket;

mod switch_bed;
use switch_bed::{link_on, Bed};

const FLOOR: usize = 128;

fn sized_worker(bed: &Bed) -> Worker {
    bed.worker_with(WorkerConfig {
        frames_per_port: 4096,
        min_frames_per_port: FLOOR,
        // Every port rests at the floor, where this test's traffic grows it.
        resting_frames_per_worker: 0,
        shrink_after: Duration::from_millis(500),
        ..WorkerConfig::default()
    })
}

fn link_stats(worker: &Worker) -> LinkStats {
    worker.stats().unwrap().links.remove(0)
}

/// Counts the frames of `sender` arriving at `sock` until `stop` and a quiet moment.
fn count_arrivals(sock: &RawSocket, sender: u8, stop: &AtomicBool) -> u64 {
    let mut got = 0;
    loop {
        match sock.recv(Duration::from_millis(300)).unwrap() {
            Some(f) if f.get(11) == Some(&sender) && f.get(12..14) == Some(&[0x88, 0xb5]) => {
                got += 1
            }
            Some(_) => {}
            None if stop.load(Ordering::Relaxed) => return got,
            None => {}
        }
    }
}

#[test]
fn ports_grow_with_what_they_receive_and_send_lose_nothing_meanwhile_and_shrink_when_it_stops() {
    let bed = Bed::new("xps-grow");
    let linked = link_on(&bed, sized_worker(&bed), 1500, [PortChoice::AfXdp; 2]);
    let before = link_stats(&linked.worker);
    assert_eq!(before.umem_frames, [Some(FLOOR), Some(FLOOR)], "{before:?}");

    let tx = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    let rx = RawSocket::open(&bed.pod_b, "eth1").unwrap();
    let stop = AtomicBool::new(false);
    // The largest each port grew to: port b only sends (to pod b), and must grow with
    // what it sends as port a does with what it receives. Sized by what it received
    // alone, the port taking a TCP flow's data to its pod stayed at the floor, and
    // dropped data (`TxFull`, `NoBuffer`) while it took only ACKs in.
    let mut largest = [0; 2];
    let mut sent = 0u64;
    let received = std::thread::scope(|s| {
        let receiver = s.spawn(|| count_arrivals(&rx, 0xa, &stop));
        // Bursts of 24 frames, fewer than the floor's fill ring holds, every
        // millisecond for up to two seconds: a rate whose 20 ms is several times the
        // floor, so the port grows while they flow.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            for _ in 0..24 {
                tx.send(&test_frame(60, 0xa, sent as u16)).unwrap();
                sent += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
            if sent % 2400 == 0 {
                let frames = link_stats(&linked.worker).umem_frames;
                for (most, now) in largest.iter_mut().zip(frames) {
                    *most = (*most).max(now.unwrap_or(0));
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        receiver.join().unwrap()
    });
    assert!(
        largest[0] > FLOOR,
        "the receiving port stayed at {largest:?}"
    );
    assert!(largest[1] > FLOOR, "the sending port stayed at {largest:?}");
    let after = link_stats(&linked.worker);
    let a_to_b = linked.counters.snapshot(Direction::AToB);
    assert_eq!(a_to_b.total_drops(), 0, "{a_to_b:?}");
    assert_eq!(received, a_to_b.frames, "frames that reached pod b");
    // Every frame sent was forwarded or counted as dropped by the kernel: a resize loses
    // none uncounted. The kernel's count is not asserted to be zero. On a busy machine
    // (two spinning threads beside the test, or a noisy CI host) the worker's core is
    // taken from it for longer than even a grown fill ring holds (1 run in 8 lost
    // 100-600 frames that way, every one counted as `rx_fill_ring_empty`), and how fast
    // the switch is belongs to the benchmarks. Port a's count is of pod a's frames the
    // kernel had no room for.
    let kernel_lost = after.kernel_drops[0]
        .map(|d| d.rx_fill_ring_empty + d.rx_ring_full + d.rx_other)
        .unwrap_or_default();
    assert_eq!(
        a_to_b.frames + kernel_lost,
        sent,
        "frames forwarded and frames the kernel counted as dropped: {after:?}"
    );

    // Calm now: the port gives its frames back.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut frames = link_stats(&linked.worker).umem_frames;
    while frames != [Some(FLOOR); 2] && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        frames = link_stats(&linked.worker).umem_frames;
    }
    assert_eq!(frames, [Some(FLOOR); 2]);
}

/// Frames in the burst below: more than the floor's fill ring holds (92 of 128 frames),
/// fewer than a port resting at 4,096 frames holds (3,584).
const BURST: u64 = 1500;

/// Sends `BURST` frames from pod a as fast as its socket takes them, with the sending
/// thread on the worker's core, and waits for the link to account for each one:
/// forwarded, dropped by the switch, or dropped by the kernel at port a for want of a
/// fill buffer. Returns the link's frames and drops a to b, and port a's kernel drops.
fn first_burst(label: &str, resting_frames_per_worker: usize) -> (u64, u64, u64) {
    let bed = Bed::new(label);
    let core = core_affinity::get_core_ids().unwrap()[0];
    let worker = bed.worker_with(WorkerConfig {
        core: Some(core.id),
        frames_per_port: 4096,
        min_frames_per_port: FLOOR,
        resting_frames_per_worker,
        ..WorkerConfig::default()
    });
    let linked = link_on(&bed, worker, 1500, [PortChoice::AfXdp; 2]);
    let resting = link_stats(&linked.worker).umem_frames;
    let tx = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    // The worker sleeps (adaptive polling) until the burst wakes it.
    std::thread::sleep(Duration::from_millis(50));
    std::thread::scope(|s| {
        s.spawn(|| {
            core_affinity::set_for_current(core);
            for n in 0..BURST {
                tx.send(&test_frame(60, 0xa, n as u16)).unwrap();
            }
        });
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = link_stats(&linked.worker);
        let a_to_b = linked.counters.snapshot(Direction::AToB);
        let kernel = stats.kernel_drops[0]
            .map(|d| d.rx_fill_ring_empty + d.rx_ring_full + d.rx_other)
            .unwrap_or_default();
        let accounted = a_to_b.frames + a_to_b.total_drops() + kernel;
        if accounted >= BURST || Instant::now() > deadline {
            eprintln!("{label}: resting {resting:?}, {a_to_b:?}, kernel {kernel}");
            return (a_to_b.frames, a_to_b.total_drops(), kernel);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new flow's first burst meets a port before the worker has looked at its traffic.
/// A worker with few ports rests each at its share of the resting frames (4,096 here),
/// so the burst is taken whole. At the floor (`resting_frames_per_worker` 0), the same
/// burst found 92 frames in the fill ring, and the kernel dropped 685 to 1,250 of the
/// 1,500 frames in three runs: what came before the worker, woken on the same core, had
/// refilled it.
#[test]
fn a_first_burst_into_a_port_of_a_worker_with_few_ports_is_taken_whole() {
    let (forwarded, switch_drops, kernel_drops) = first_burst("xps-burst", 16_384);
    assert_eq!(
        (forwarded, switch_drops, kernel_drops),
        (BURST, 0, 0),
        "frames forwarded, dropped by the switch, dropped by the kernel"
    );
}
