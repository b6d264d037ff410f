//! xwired's TOML configuration: any text is a configuration or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_model::config::DaemonConfig;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = DaemonConfig::parse(text, std::path::Path::new("fuzz.toml"));
    }
});
