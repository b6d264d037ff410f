//! Ports sized by their traffic, with real frames: a port opens at the floor, grows while
//! frames flow (its fill ring then holds the burst of a generator catching up, which a
//! port of 256 frames dropped as `rx_fill_ring_empty`), loses nothing uncounted while it
//! is reopened larger, and gives its frames back once the traffic stops. The test counts
//! frames; it never times them.

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
