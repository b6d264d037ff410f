//! `xwire`, the CNI plugin binary (the conflist's "type").

use std::io::Read;

fn main() {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let mut stdin = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let code = xwire_cni::run(&env, &stdin, &mut std::io::stdout());
    std::process::exit(code);
}
