//! The local-fwd scenario builds and tears down each device and carries frames through it
//! (a smoke test: speed is measured by `xwire-perf local-fwd`, never asserted here).

use xwire_perf::local_fwd::{measure, Device};

#[test]
fn every_device_carries_frames() {
    for device in [Device::Direct, Device::Bridge, Device::Xwire] {
        let row = measure(device, 128, 0.3, Some(20_000)).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert_eq!(row.frame_bytes, 128);
        assert!(row.p50_us.is_some(), "{row:?}");
    }
}
