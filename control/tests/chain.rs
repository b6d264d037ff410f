//! Chaining into a real configuration directory, for kindnet's conflist and for a
//! bridge + host-local one: the entry goes last, a second run changes nothing, a file
//! that does not parse is never written over, a primary plugin that rewrites its file
//! gets xwire again, and uninstall takes out exactly what was added.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use xwire_control::chain::{self, ChainConfig, Ensured, Installer};

const PRIMARIES: [&str; 2] = ["10-kindnet.conflist", "10-bridge.conflist"];

/// A directory of its own under the target directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xwire-chain-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("net.d")).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        Scratch(dir)
    }
    fn conf(&self) -> PathBuf {
        self.0.join("net.d")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cni")
        .join(name);
    std::fs::read(path).unwrap()
}

fn config(scratch: &Scratch, plugin: Option<PathBuf>) -> ChainConfig {
    let mut entry = serde_json::Map::new();
    entry.insert("socket".into(), json!("/run/xwire/xwired.sock"));
    ChainConfig {
        conf_dir: scratch.conf(),
        bin_dir: scratch.0.join("bin"),
        plugin_binary: plugin,
        entry,
        state_dir: Some(scratch.0.join("state")),
    }
}

fn json_of(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn plugin_types(path: &Path) -> Vec<String> {
    json_of(path)["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap().to_owned())
        .collect()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter(|n| n.starts_with('.'))
        .collect()
}

#[test]
fn the_entry_goes_last_once_and_comes_out_exactly() {
    for primary in PRIMARIES {
        let scratch = Scratch::new(&format!("once-{}", &primary[3..9]));
        let path = scratch.conf().join(primary);
        std::fs::write(&path, fixture(primary)).unwrap();
        // A later file, which the runtime does not use, is not touched.
        let later = scratch.conf().join("99-other.conflist");
        std::fs::write(&later, fixture(primary)).unwrap();
        let installer = Installer::new(config(&scratch, None));

        assert_eq!(
            installer.ensure().unwrap(),
            Ensured::Chained(primary.into())
        );
        let types = plugin_types(&path);
        assert_eq!(types.last().map(String::as_str), Some("xwire"), "{primary}");
        assert_eq!(types.iter().filter(|t| *t == "xwire").count(), 1);
        let chained = std::fs::read(&path).unwrap();
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();

        assert_eq!(
            installer.ensure().unwrap(),
            Ensured::AlreadyChained(primary.into())
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            chained,
            "{primary}: a second run rewrote"
        );
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            modified
        );
        assert_eq!(std::fs::read(&later).unwrap(), fixture(primary));
        assert!(leftovers(&scratch.conf()).is_empty());

        assert_eq!(installer.uninstall().unwrap(), [primary.to_owned()]);
        assert!(
            std::fs::read(&path).unwrap() == fixture(primary),
            "{primary}: uninstall did not give the original bytes back"
        );
        assert_eq!(installer.uninstall().unwrap(), Vec::<String>::new());
        let kept = std::fs::read_dir(scratch.0.join("state")).unwrap().count();
        assert_eq!(
            kept, 0,
            "{primary}: the kept original outlived the uninstall"
        );
    }
}

#[test]
fn an_operators_own_formatting_comes_back_byte_for_byte_and_later_changes_are_kept() {
    // Tabs, keys in the operator's order, no newline at the end: what xwire writes is
    // pretty-printed, so only the kept bytes can give this back.
    let written = "{\"plugins\": [\n\t{\"type\": \"bridge\", \"bridge\": \"cni0\", \"ipam\": {\"type\": \"host-local\", \"subnet\": \"10.22.0.0/16\"}}\n], \"name\": \"podnet\", \"cniVersion\": \"1.0.0\"}";
    let scratch = Scratch::new("bytes");
    let path = scratch.conf().join("10-mine.conflist");
    std::fs::write(&path, written).unwrap();
    let installer = Installer::new(config(&scratch, None));
    assert_eq!(
        installer.ensure().unwrap(),
        Ensured::Chained("10-mine.conflist".into())
    );
    assert_ne!(std::fs::read_to_string(&path).unwrap(), written);
    drop(installer);
    // A daemon started again (after a crash, say) still has the original bytes.
    let restarted = Installer::new(config(&scratch, None));
    assert_eq!(
        restarted.ensure().unwrap(),
        Ensured::AlreadyChained("10-mine.conflist".into())
    );
    assert_eq!(restarted.uninstall().unwrap(), ["10-mine.conflist"]);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written);

    // Something else changes the file while xwire is chained: that change stays, and
    // only xwire's entry goes.
    let installer = Installer::new(config(&scratch, None));
    installer.ensure().unwrap();
    let mut list = json_of(&path);
    list["plugins"].as_array_mut().unwrap().insert(
        1,
        json!({"type": "portmap", "capabilities": {"portMappings": true}}),
    );
    std::fs::write(&path, serde_json::to_vec(&list).unwrap()).unwrap();
    assert_eq!(installer.uninstall().unwrap(), ["10-mine.conflist"]);
    assert_eq!(plugin_types(&path), ["bridge", "portmap"]);
    assert_eq!(
        std::fs::read_dir(scratch.0.join("state")).unwrap().count(),
        0
    );
}

#[test]
fn a_file_that_does_not_parse_is_waited_for_not_written_over() {
    let scratch = Scratch::new("unparsed");
    let path = scratch.conf().join("10-kindnet.conflist");
    let half = &fixture("10-kindnet.conflist")[..40];
    std::fs::write(&path, half).unwrap();
    let installer = Installer::new(config(&scratch, None));
    match installer.ensure().unwrap() {
        Ensured::Waiting { file, why } => {
            assert_eq!(file, "10-kindnet.conflist");
            assert!(why.contains("not JSON"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(&path).unwrap(), half);
    assert_eq!(installer.uninstall().unwrap(), Vec::<String>::new());
    assert_eq!(std::fs::read(&path).unwrap(), half);
    // An empty directory is waited for too.
    std::fs::remove_file(&path).unwrap();
    assert_eq!(installer.ensure().unwrap(), Ensured::NoFile);
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_watcher_chains_again_after_the_primary_rewrites_and_uninstalls_on_stop() {
    for primary in PRIMARIES {
        let scratch = Scratch::new(&format!("watch-{}", &primary[3..9]));
        let plugin = scratch.0.join("xwire-image-copy");
        std::fs::write(&plugin, b"#!/bin/sh\nexit 0\n").unwrap();
        let installer = Installer::new(config(&scratch, Some(plugin)));
        let (stop, stopped) = crossbeam_channel::bounded(1);
        // The recheck timer is an hour: only inotify can wake it in time.
        let watcher =
            std::thread::spawn(move || chain::run(installer, stopped, Duration::from_secs(3600)));
        let installed = scratch.0.join("bin/xwire");
        wait_for("the plugin binary", || installed.exists());

        // The primary writes its file after the daemon started, as on a new node.
        let path = scratch.conf().join(primary);
        std::fs::write(&path, fixture(primary)).unwrap();
        let chained = || {
            std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|v| {
                    v["plugins"].as_array().unwrap().last().unwrap()["type"] == "xwire"
                })
        };
        wait_for("the first chaining", chained);
        // The primary rewrites it (kindnet does, on every start): xwire comes back.
        std::fs::write(&path, fixture(primary)).unwrap();
        wait_for("chaining after the rewrite", chained);

        drop(stop);
        watcher.join().unwrap();
        let original: Value = serde_json::from_slice(&fixture(primary)).unwrap();
        assert_eq!(json_of(&path), original);
        assert!(!installed.exists(), "uninstall left the plugin binary");
        assert!(leftovers(&scratch.conf()).is_empty());
    }
}
