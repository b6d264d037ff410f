//! Encode and decode cost of the data-plane format: one 64-byte frame, one 1500-byte
//! frame, and a batch of 32 frames of 64 bytes, each packed into one datagram.
//! Throughput is in frames, so criterion's "elem/s" reads as frames per second.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xwire_proto::data::{Datagram, DatagramBatch};
use xwire_proto::WireId;

const MAX_DATAGRAM: usize = 65_527;

struct Case {
    name: &'static str,
    frame_len: usize,
    frames: usize,
}

const CASES: [Case; 3] = [
    Case {
        name: "1x64B",
        frame_len: 64,
        frames: 1,
    },
    Case {
        name: "1x1500B",
        frame_len: 1500,
        frames: 1,
    },
    Case {
        name: "32x64B",
        frame_len: 64,
        frames: 32,
    },
];

/// The sender's encoder, as the peer transport uses it: frames into a batch, taken
/// out as one datagram.
fn encode(batch: &mut DatagramBatch, frames: &[Vec<u8>]) -> bytes::Bytes {
    for (uid, frame) in frames.iter().enumerate() {
        batch.push(WireId(uid as u64), frame).expect("frame fits");
    }
    batch.take().expect("frames were pushed")
}

fn bench_data_format(c: &mut Criterion) {
    let mut group = c.benchmark_group("datagram");
    for case in &CASES {
        let frames: Vec<Vec<u8>> = (0..case.frames)
            .map(|i| vec![i as u8; case.frame_len])
            .collect();
        let mut batch = DatagramBatch::new(MAX_DATAGRAM);
        group.throughput(Throughput::Elements(case.frames as u64));
        group.bench_function(format!("encode/{}", case.name), |b| {
            b.iter(|| encode(black_box(&mut batch), black_box(&frames)))
        });
        let datagram = encode(&mut batch, &frames);
        let datagram = &datagram[..];
        group.bench_function(format!("decode/{}", case.name), |b| {
            b.iter(|| {
                let d = Datagram::new_checked(black_box(datagram)).expect("valid datagram");
                d.frames()
                    .map(|f| f.wire.0 as usize ^ f.frame.len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_data_format);
criterion_main!(benches);
