//! Lab files as `xwirectl lab up` reads them: anything is refused with a place or parsed;
//! what parses survives a round trip through the JSON the running lab keeps, and parses
//! again the same with itself as the running lab (`lab edit` of an unchanged file).
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_model::lab::{self as file, Lab};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(lab) = file::parse(text, None) {
        let json = serde_json::to_vec(&lab).expect("a lab serializes");
        let back: Lab = serde_json::from_slice(&json).expect("its JSON reads back");
        assert_eq!(back, lab);
        assert_eq!(file::parse(text, Some(&lab)).expect("parses again"), lab);
    }
});
