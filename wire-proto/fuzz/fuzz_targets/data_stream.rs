//! A data stream's bytes: the preamble, then frame records read one at a time the way a
//! receiver drains its buffer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_proto::data::{next_stream_frame, parse_stream_preamble, STREAM_PREAMBLE_LEN};

fuzz_target!(|data: &[u8]| {
    if parse_stream_preamble(data).is_err() {
        return;
    }
    let mut rest = &data[STREAM_PREAMBLE_LEN..];
    while let Ok(Some((frame, used))) = next_stream_frame(rest) {
        assert!(used > frame.frame.len() && used <= rest.len());
        rest = &rest[used..];
    }
});
