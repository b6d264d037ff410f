//! Impairments and capture in the switch, with real frames between two pod namespaces:
//! a delay shows in ping's round trip, loss drops and counts, clearing a delay loses
//! none of the frames it holds, and a tap sees each direction in order.

use std::time::{Duration, Instant};

use xwire_fastpath::capture::{Direction as TapDirection, Tap};
use xwire_fastpath::impairment::{ImpairmentSpec, Loss};
use xwire_fastpath::{Direction, DropReason, WorkerError};
use xwire_proto::WireId;
use xwire_testbed::checks::{ping_rtts, test_frame};
use xwire_testbed::RawSocket;

mod switch_bed;
use switch_bed::{link, Bed};

const WIRE: WireId = WireId(1);

fn delay(ms: u64) -> ImpairmentSpec {
    ImpairmentSpec {
        delay: Duration::from_millis(ms),
        ..ImpairmentSpec::default()
    }
}

fn address(bed: &Bed) {
    bed.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
    bed.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();
}

#[test]
fn a_delay_each_way_adds_to_pings_round_trip_and_clearing_takes_it_away() {
    let bed = Bed::new("xim-delay");
    let linked = link(&bed);
    address(&bed);
    let [a, b] = [linked.ports[0].id, linked.ports[1].id];
    // Addresses resolved before the delay, so that no ARP exchange adds to a round trip.
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 2).unwrap().len(), 2);
    linked
        .worker
        .set_impairment(WIRE, a, Some(delay(20)))
        .unwrap();
    linked
        .worker
        .set_impairment(WIRE, b, Some(delay(20)))
        .unwrap();
    let rtts = ping_rtts(&bed.pod_a, "192.0.2.2", 5).unwrap();
    assert_eq!(rtts.len(), 5, "{rtts:?}");
    assert!(rtts.iter().all(|&ms| ms >= 40.0), "{rtts:?}");

    // One way only: the round trip holds one delay.
    linked.worker.set_impairment(WIRE, b, None).unwrap();
    let rtts = ping_rtts(&bed.pod_a, "192.0.2.2", 3).unwrap();
    assert_eq!(rtts.len(), 3, "{rtts:?}");
    assert!(
        rtts.iter().all(|&ms| (20.0..40.0).contains(&ms)),
        "{rtts:?}"
    );

    linked.worker.set_impairment(WIRE, a, None).unwrap();
    let rtts = ping_rtts(&bed.pod_a, "192.0.2.2", 3).unwrap();
    assert_eq!(rtts.len(), 3, "{rtts:?}");
    assert!(rtts.iter().all(|&ms| ms < 20.0), "{rtts:?}");
}

#[test]
fn total_loss_drops_every_frame_one_way_and_counts_it() {
    let bed = Bed::new("xim-loss");
    let linked = link(&bed);
    address(&bed);
    let a = linked.ports[0].id;
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 1).unwrap().len(), 1);
    let sent_before = linked.counters.snapshot(Direction::AToB).frames;
    let lossy = ImpairmentSpec {
        loss: Loss::Random(1.0),
        ..ImpairmentSpec::default()
    };
    linked.worker.set_impairment(WIRE, a, Some(lossy)).unwrap();
    assert!(ping_rtts(&bed.pod_a, "192.0.2.2", 3).unwrap().is_empty());
    let lost = linked.counters.snapshot(Direction::AToB).drops[DropReason::ImpairLoss as usize];
    assert!(lost >= 3, "{lost}");
    assert_eq!(
        linked.counters.snapshot(Direction::AToB).frames,
        sent_before
    );
    linked.worker.set_impairment(WIRE, a, None).unwrap();
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 2).unwrap().len(), 2);
}

#[test]
fn bad_settings_and_unknown_links_are_refused() {
    let bed = Bed::new("xim-bad");
    let linked = link(&bed);
    let a = linked.ports[0].id;
    let bad = ImpairmentSpec {
        duplicate: 1.5,
        ..ImpairmentSpec::default()
    };
    let refused = linked
        .worker
        .set_impairment(WIRE, a, Some(bad))
        .unwrap_err();
    assert!(refused.to_string().contains("duplicate"), "{refused}");
    assert!(matches!(
        linked.worker.set_impairment(WireId(99), a, None),
        Err(WorkerError::NoSuchLink(..))
    ));
}

/// Frames held by a long delay still arrive, in order, when the delay is cleared, and
/// frames sent after the clear arrive behind them.
#[test]
fn clearing_a_delay_loses_none_of_the_frames_it_holds() {
    let bed = Bed::new("xim-clear");
    let linked = link(&bed);
    let a = linked.ports[0].id;
    let sock_a = RawSocket::open(&bed.pod_a, "eth1").unwrap();
    let sock_b = RawSocket::open(&bed.pod_b, "eth1").unwrap();
    linked
        .worker
        .set_impairment(WIRE, a, Some(delay(300)))
        .unwrap();
    const BEFORE: u16 = 50;
    const AFTER: u16 = 50;
    for seq in 0..BEFORE {
        sock_a.send(&test_frame(100, 0xa, seq)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while linked.worker.held_frames(WIRE, a).unwrap() < usize::from(BEFORE) {
        assert!(Instant::now() < deadline, "the frames were not held");
        std::thread::sleep(Duration::from_millis(1));
    }
    linked.worker.set_impairment(WIRE, a, None).unwrap();
    for seq in BEFORE..BEFORE + AFTER {
        sock_a.send(&test_frame(100, 0xa, seq)).unwrap();
    }
    let mut seqs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seqs.len() < usize::from(BEFORE + AFTER) && Instant::now() < deadline {
        if let Some(frame) = sock_b.recv(Duration::from_millis(100)).unwrap() {
            if frame.get(11) == Some(&0xa) && frame.get(12..14) == Some(&[0x88, 0xb5]) {
                seqs.push(u16::from_be_bytes([frame[14], frame[15]]));
            }
        }
    }
    assert_eq!(seqs, (0..BEFORE + AFTER).collect::<Vec<_>>());
}

#[test]
fn a_tap_sees_each_ping_request_and_reply_in_its_direction_and_in_order() {
    let bed = Bed::new("xim-tap");
    let linked = link(&bed);
    address(&bed);
    let b = linked.ports[1].id;
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 1).unwrap().len(), 1);
    // Named from B's side: its egress (the replies) is the tap's A-to-B.
    let (tap, reader) = Tap::new(&[TapDirection::AToB, TapDirection::BToA], 128, 1024);
    linked.worker.capture(WIRE, b, tap).unwrap();
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 3).unwrap().len(), 3);
    // ICMP (IPv4 protocol 1): type at byte 34, echo sequence at 40..42.
    let icmp: Vec<(TapDirection, u8, u16)> = reader
        .frames
        .try_iter()
        .filter(|f| f.data.get(12..14) == Some(&[0x08, 0x00]) && f.data.get(23) == Some(&1))
        .map(|f| {
            (
                f.direction,
                f.data[34],
                u16::from_be_bytes([f.data[40], f.data[41]]),
            )
        })
        .collect();
    let expected: Vec<(TapDirection, u8, u16)> = (1..=3)
        .flat_map(|seq| [(TapDirection::BToA, 8, seq), (TapDirection::AToB, 0, seq)])
        .collect();
    assert_eq!(icmp, expected);
    // The capture ends when its reader goes; the wire keeps forwarding.
    drop(reader);
    assert_eq!(ping_rtts(&bed.pod_a, "192.0.2.2", 2).unwrap().len(), 2);
}
