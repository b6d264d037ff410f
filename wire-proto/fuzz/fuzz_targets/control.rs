//! A control stream's bytes: records are split off and decoded in turn; a message that
//! decodes must re-encode to a record that decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_proto::control::{next_control_record, ControlMessage};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((message, used))) = next_control_record(rest) {
        rest = &rest[used..];
        if let Ok(message) = message {
            let mut again = Vec::new();
            message.encode(&mut again);
            let (decoded, _) = next_control_record(&again)
                .expect("own framing is valid")
                .expect("own record is whole");
            assert_eq!(decoded.expect("own message decodes"), message);
        }
    }
    let _ = ControlMessage::decode(data);
});
