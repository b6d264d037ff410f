//! A received QUIC DATAGRAM: the checked view must refuse bad input, and a datagram it
//! accepts must iterate exactly `frame_count` frames that re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_proto::data::{Datagram, DatagramBatch};

fuzz_target!(|data: &[u8]| {
    let Ok(datagram) = Datagram::new_checked(data) else {
        return;
    };
    assert_eq!(datagram.frames().count(), datagram.frame_count());
    // The encoder the peer transport sends with.
    let mut batch = DatagramBatch::new(data.len());
    for frame in datagram.frames() {
        batch.push(frame.wire, frame.frame).expect("re-encoding fits");
    }
    let again = batch.take().expect("a valid datagram has frames");
    assert_eq!(&again[..], data);
});
