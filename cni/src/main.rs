//! `xwire`, the CNI plugin binary (the conflist's "type").

#![forbid(unsafe_code)]

fn main() {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let code = xwire_cni::run(
        &env,
        &mut std::io::stdin(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    std::process::exit(code);
}
