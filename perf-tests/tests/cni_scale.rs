//! The cni-scale scenario, small: six pods added and deleted through the plugin by three
//! callers at once, beside the bridge baseline under the same concurrency, with the
//! daemons' breakdown of the calls by step (a smoke test: the figures are `xwire-perf
//! cni-scale`'s, never asserted here).

use std::path::PathBuf;
use std::sync::Once;

use xwire_perf::cni_scale::{run, Binaries};
use xwire_testbed::cluster::built_beside;

fn binaries() -> Binaries {
    // This package's own binary marks the target directory the others are built into.
    let beside = PathBuf::from(env!("CARGO_BIN_EXE_xwire-perf"));
    static XWIRED: Once = Once::new();
    static PLUGIN: Once = Once::new();
    Binaries {
        xwired: built_beside(&XWIRED, &beside, "xwire-control", "xwired"),
        plugin: built_beside(&PLUGIN, &beside, "xwire-cni", "xwire"),
    }
}

#[test]
fn pods_come_and_go_with_several_callers_at_once() {
    let report = run(&binaries(), 6, 3).unwrap();
    assert_eq!((report.pods, report.callers), (6, 3));
    for times in [
        report.xwire_add,
        report.xwire_del,
        report.bridge_add,
        report.bridge_del,
    ] {
        assert_eq!(times.calls, 6, "{report:?}");
        assert!(
            times.p99_ms >= times.p50_ms && times.p50_ms > 0.0,
            "{report:?}"
        );
    }
    // The daemons broke their calls into steps: ADD made interfaces, DEL deleted them,
    // and every call wrote the store; the steps add up to no more than the calls.
    let steps = &report.steps;
    for (command, made_or_deleted) in [("add", "netlink"), ("del", "netlink_pod_interfaces")] {
        let of = if command == "add" {
            &steps.add
        } else {
            &steps.del
        };
        let step = |name: &str| of.get(name).copied().unwrap_or_default();
        assert!(step(made_or_deleted) > 0.0, "{command}: {of:?}");
        assert!(step("store_commit") > 0.0, "{command}: {of:?}");
        let parts: f64 = of
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "daemon" | "outside"))
            .map(|(_, ms)| ms)
            .sum();
        assert!(
            (parts - step("daemon")).abs() <= 0.05 * step("daemon") + 0.5,
            "{command}: the steps ({parts:.2} ms) are not the daemon's time: {of:?}"
        );
    }
    assert!(steps.plugin_start_ms > 0.0, "{steps:?}");
}
