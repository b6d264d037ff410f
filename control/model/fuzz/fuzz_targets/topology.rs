//! Topology files as `xwirectl topology apply` reads them (YAML or JSON). What parses
//! must pass its own checks again after a round trip through JSON.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_model::topology;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(objects) = topology::parse(text) {
        let json = serde_json::to_string(&objects).expect("parsed objects serialize");
        assert_eq!(topology::parse(&json).expect("own output parses"), objects);
    }
});
