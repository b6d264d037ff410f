//! Bytes on the daemon's local API socket, read as the daemon reads requests and as the
//! plugin reads responses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_proto::local::{decode_request, decode_response, encode, next_record};

fuzz_target!(|data: &[u8]| {
    if let Ok((id, request)) = decode_request(data) {
        let mut again = Vec::new();
        encode(id, &request, &mut again);
        assert_eq!(decode_request(&again[4..]).expect("own request decodes"), (id, request));
    }
    if let Ok((id, response)) = decode_response(data) {
        let mut again = Vec::new();
        encode(id, &response, &mut again);
        assert_eq!(decode_response(&again[4..]).expect("own response decodes"), (id, response));
    }
    let mut rest = data;
    while let Ok(Some((body, used))) = next_record(rest) {
        let _ = decode_request(body);
        rest = &rest[used..];
    }
});
