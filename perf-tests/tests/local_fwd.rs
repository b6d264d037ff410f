//! The local-fwd scenario builds and tears down each device and carries frames through it
//! (a smoke test: speed is measured by `xwire-perf local-fwd`, never asserted here). DPDK
//! testpmd and Open vSwitch are not CI packages; `perf-tests/anchors/run-local-fwd.sh`
//! installs them for the full scenario.

use std::time::Duration;

use xwire_bench::traffic::Wait;
use xwire_bench::trial::Flow;
use xwire_perf::local_fwd::{idle, lossfree, paced, peak, wake_floor, Device, SearchLength};
use xwire_perf::worker_settings::WorkerSettings;

#[test]
fn every_device_carries_frames_at_full_speed_and_paced() {
    for device in [
        Device::Direct,
        Device::Bridge,
        Device::Xwire(WorkerSettings::default()),
    ] {
        let row = peak(device, 128, 0.3).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert_eq!((row.frame_bytes, row.p50_us), (128, None), "{row:?}");

        let row = paced(device, 128, 0.3, (20_000, Wait::Yield), false).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert!(row.p50_us.is_some() && row.p99_us >= row.p50_us, "{row:?}");

        // The cost pass: the generator sleeps between frames; the machine's CPU time per
        // frame is there, and the run still carries (nearly) all it is offered. With
        // `--verbose`'s report of the device's counters (on stderr).
        let row = paced(device, 128, 0.3, (20_000, Wait::Sleep), true).unwrap();
        assert!(row.cpu_ns_per_frame.is_some_and(|ns| ns > 0.0), "{row:?}");
        assert!(row.loss_ratio < 0.5, "{row:?}");
    }
}

#[test]
fn the_lossfree_search_reports_each_direction_alone_and_at_once() {
    let rows = lossfree(
        Device::Xwire(WorkerSettings::default()),
        64,
        SearchLength {
            trial_seconds: 0.2,
            // A smoke test on a busy machine: the short trials decide.
            confirm_seconds: 0.0,
        },
        &[Flow::AToB, Flow::BToA, Flow::Both],
        // `--verbose`'s report of the switch's counters over the search (on stderr).
        true,
    )
    .unwrap();
    let directions: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r.figure.direction.as_str(), r.figure.at_once))
        .collect();
    assert_eq!(
        directions,
        [
            ("a->b", false),
            ("b->a", false),
            ("a->b", true),
            ("b->a", true)
        ]
    );
    for row in &rows {
        let f = &row.figure;
        assert_eq!((row.name.as_str(), f.frame_bytes), ("xwire", 64));
        // Not bounded by the full-rate figure: at full rate both ends' threads share a
        // CPU, and a generator may offer less than in a paced trial.
        assert!(f.lossfree_pps > 0.0 && f.peak_offered_pps > 0.0, "{f:?}");
        assert!(f.trials >= 1 && f.p99_us.is_some(), "{f:?}");
    }
}

#[test]
fn an_idle_device_forwards_every_probe() {
    // `idle` fails unless every probe arrives.
    let row = idle(
        Device::Xwire(WorkerSettings::default()),
        0.3,
        Duration::from_millis(20),
        5,
    )
    .unwrap();
    assert_eq!(row.probes, 5);
    assert!(row.first_frame_max_us >= row.first_frame_p50_us, "{row:?}");
    let floor = wake_floor(Duration::from_millis(5), 5).unwrap();
    assert!(floor.first_frame_p50_us > 0.0, "{floor:?}");
}
