//! A received QUIC DATAGRAM: the checked view must refuse bad input, and a datagram it
//! accepts must iterate exactly `frame_count` frames that re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_proto::data::{Datagram, DatagramBuilder};

fuzz_target!(|data: &[u8]| {
    let Ok(datagram) = Datagram::new_checked(data) else {
        return;
    };
    assert_eq!(datagram.frames().count(), datagram.frame_count());
    let mut again = vec![0u8; data.len()];
    let mut builder = DatagramBuilder::new(&mut again).expect("room for a valid datagram");
    for frame in datagram.frames() {
        builder.push(frame.link_uid, frame.frame).expect("re-encoding fits");
    }
    let len = builder.finish();
    assert_eq!(&again[..len], data);
});
