//! The AEAD of QUIC packet protection through each rustls crypto provider the fast path
//! could use (ring, aws-lc-rs) and each TLS 1.3 suite: seal and open one packet of a
//! 1200-byte path (quinn's smallest) and of a 9000-byte one (a jumbo underlay), through
//! rustls's own QUIC packet keys, as quinn calls them. `xwire_pki::tls::provider` says
//! which was chosen and what this measured. Throughput is in bytes.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rustls::crypto::CryptoProvider;
use rustls::quic::{Keys, Suite, Version};
use rustls::Side;
use rustls::SupportedCipherSuite;

const HEADER: [u8; 16] = [0x40; 16];

/// One suite's keys for both ends: what the client seals, the server opens.
fn keys(suite: SupportedCipherSuite) -> Option<(Keys, Keys)> {
    let tls13 = suite.tls13()?;
    let quic = Suite {
        suite: tls13,
        quic: tls13.quic?,
    };
    let cid = b"xwire-bench";
    Some((
        quic.keys(cid, Side::Client, Version::V1),
        quic.keys(cid, Side::Server, Version::V1),
    ))
}

fn providers() -> [(&'static str, CryptoProvider); 2] {
    [
        ("ring", rustls::crypto::ring::default_provider()),
        ("aws-lc-rs", rustls::crypto::aws_lc_rs::default_provider()),
    ]
}

fn aead(c: &mut Criterion) {
    let mut group = c.benchmark_group("quic_packet");
    for size in [1200usize, 9000] {
        group.throughput(Throughput::Bytes(size as u64));
        for (provider_name, provider) in providers() {
            for suite in provider.cipher_suites.iter().copied() {
                let Some((client, server)) = keys(suite) else {
                    continue;
                };
                let name = format!("{provider_name}/{:?}/{size}", suite.suite());
                let tag_len = 16;
                let mut packet = vec![0x5au8; size - HEADER.len()];
                let payload_len = packet.len() - tag_len;
                group.bench_function(format!("seal/{name}"), |b| {
                    let mut number = 0u64;
                    b.iter(|| {
                        number += 1;
                        let tag = client
                            .local
                            .packet
                            .encrypt_in_place(number, &HEADER, &mut packet[..payload_len])
                            .expect("seals");
                        black_box(tag);
                    })
                });
                group.bench_function(format!("seal+open/{name}"), |b| {
                    let mut number = 0u64;
                    b.iter(|| {
                        number += 1;
                        let (body, tag) = packet.split_at_mut(payload_len);
                        let sealed = client
                            .local
                            .packet
                            .encrypt_in_place(number, &HEADER, body)
                            .expect("seals");
                        tag.copy_from_slice(sealed.as_ref());
                        let opened = server
                            .remote
                            .packet
                            .decrypt_in_place(number, &HEADER, &mut packet)
                            .expect("opens what was sealed");
                        black_box(opened.len());
                    })
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, aead);
criterion_main!(benches);
