//! A CNI call as a runtime (or anyone) might make it: the first bytes pick the command
//! and the CNI_ARGS and CNI_NETNS values, the rest is stdin. Parsing must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xwire_cni::Invocation;

const COMMANDS: [&str; 8] = ["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC", "", "FROB"];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut parts = text.splitn(3, '\n');
    let args = parts.next().unwrap_or_default().to_owned();
    let netns = parts.next().unwrap_or_default().to_owned();
    let stdin = parts.next().unwrap_or_default();
    let env = vec![
        ("CNI_COMMAND".to_owned(), COMMANDS[usize::from(pick) % COMMANDS.len()].to_owned()),
        ("CNI_CONTAINERID".to_owned(), "c".to_owned()),
        ("CNI_IFNAME".to_owned(), "eth0".to_owned()),
        ("CNI_NETNS".to_owned(), netns),
        ("CNI_ARGS".to_owned(), args),
    ];
    let _ = Invocation::parse(&env, stdin.as_bytes());
});
