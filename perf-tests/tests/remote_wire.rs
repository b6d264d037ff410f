//! The remote-wire scenario builds each path between two node namespaces and carries
//! frames and a TCP transfer over it (a smoke test: speed is measured by
//! `xwire-perf remote-wire`, never asserted here).

use xwire_bench::traffic::Wait;
use xwire_bench::trial::Flow;
use xwire_fastpath::peer::Carrier;
use xwire_perf::measure::SearchLength;
use xwire_perf::remote_wire::{lossfree, paced, peak, tcp, Setup, WirePath};

#[test]
fn every_path_carries_frames_at_full_speed_paced_and_tcp() {
    let setup = Setup::default();
    for path in [
        WirePath::Vxlan,
        WirePath::Xwire(Carrier::Datagram),
        WirePath::Xwire(Carrier::Stream),
    ] {
        let row = peak(path, 1514, 0.3, setup).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert_eq!((row.frame_bytes, row.tcp_gbps), (1514, None), "{row:?}");

        let row = paced(path, 64, 0.3, 10_000, setup, Wait::Yield).unwrap();
        assert!(row.delivered_pps > 0.0, "{row:?}");
        assert!(row.p50_us.is_some() && row.p99_us >= row.p50_us, "{row:?}");

        let row = paced(path, 64, 0.3, 10_000, setup, Wait::Sleep).unwrap();
        assert!(row.cpu_ns_per_frame.is_some_and(|ns| ns > 0.0), "{row:?}");

        // Each direction gets its own figure; frames go to the other pod's address.
        let rows = lossfree(
            path,
            1514,
            SearchLength {
                trial_seconds: 0.2,
                // A smoke test on a busy machine: the short trials decide.
                confirm_seconds: 0.0,
            },
            &[Flow::Both],
            setup,
        )
        .unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        for row in &rows {
            assert!(row.figure.lossfree_pps > 0.0, "{row:?}");
        }

        let row = tcp(path, 1.0, setup).unwrap();
        assert!(row.tcp_gbps.is_some_and(|g| g > 0.0), "{row:?}");
        assert!(row.delivered_pps > 0.0, "{row:?}");
    }
}

#[test]
fn a_small_underlay_still_carries_full_size_frames() {
    // At 1600 bytes a 1514-byte frame does not fit a QUIC datagram with xwire's headers,
    // so it takes the stream; it must still arrive.
    let setup = Setup {
        underlay_mtu: 1600,
        ..Setup::default()
    };
    let row = paced(
        WirePath::Xwire(Carrier::Datagram),
        1514,
        0.3,
        5_000,
        setup,
        Wait::Sleep,
    )
    .unwrap();
    assert!(row.loss_ratio < 0.5, "{row:?}");
}
