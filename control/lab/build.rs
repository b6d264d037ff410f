//! KNE's topology schema as a descriptor set, for reading its text-format files at run
//! time (`src/import/kne.rs`). protox compiles it in Rust: no protoc needed.

use prost::Message;

fn main() {
    let proto = "src/import/kne_topo.proto";
    println!("cargo:rerun-if-changed={proto}");
    let set = protox::compile([proto], ["src/import"]).expect("KNE's topology schema compiles");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("kne_topo.bin"), set.encode_to_vec()).expect("OUT_DIR is writable");
}
