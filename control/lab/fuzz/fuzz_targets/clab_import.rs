//! containerlab topology files as `xwirectl lab import` reads them: refused, or turned
//! into a lab file that `lab up` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_lab::{file, import};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = std::path::Path::new("/fuzz/lab.clab.yml");
    if let Ok(imported) = import::import(text, file, 2, None) {
        file::parse(&imported.lab, None).expect("an imported lab parses");
    }
});
