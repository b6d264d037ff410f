//! The local-fwd scenario builds and tears down each device and carries frames through it
//! (a smoke test: speed is measured by `xwire-perf local-fwd`, never asserted here). DPDK
//! testpmd and Open vSwitch are not CI packages; `perf-tests/anchors/run-local-fwd.sh`
//! installs them for the full scenario.

use std::time::Duration;

use xwire_perf::local_fwd::{idle, paced, peak, wake_floor, Device};

#[test]
fn every_device_carries_frames_at_full_speed_and_paced() {
    for device in [Device::Direct, Device::Bridge, Device::Xwire] {
        let row = peak(device, 128, 0.3).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert_eq!((row.frame_bytes, row.p50_us), (128, None), "{row:?}");

        let row = paced(device, 128, 0.3, 20_000).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert!(row.p50_us.is_some() && row.p99_us >= row.p50_us, "{row:?}");
    }
}

#[test]
fn an_idle_device_forwards_every_probe() {
    // `idle` fails unless every probe arrives.
    let row = idle(Device::XwireAdaptive, 0.3, Duration::from_millis(20), 5).unwrap();
    assert_eq!(row.probes, 5);
    assert!(row.first_frame_max_us >= row.first_frame_p50_us, "{row:?}");
    let floor = wake_floor(Duration::from_millis(5), 5).unwrap();
    assert!(floor.first_frame_p50_us > 0.0, "{floor:?}");
}
