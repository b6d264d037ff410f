//! The test bed proves itself on real namespaces and veth pairs (these tests need root).

use std::fs::File;
use std::os::fd::AsFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use xwire_testbed::{sweep_stale_namespaces, Netns, Veth};

fn ping(from: &Netns, to_ip: &str) -> bool {
    from.exec(Command::new("ping").args(["-c", "1", "-W", "2", to_ip]))
        .expect("ping runs")
        .status
        .success()
}

/// Whether an interface named `ifname` exists in the namespace open at `fd`.
fn exists_in(fd: &File, ifname: &str) -> bool {
    std::thread::scope(|s| {
        s.spawn(|| {
            xwire_netns::enter(fd.as_fd()).expect("enter the namespace");
            std::fs::read_to_string("/proc/thread-self/net/dev")
                .expect("read net/dev")
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{ifname}:")))
        })
        .join()
        .expect("probe thread")
    })
}

fn root_has(ifname: &str) -> bool {
    std::fs::read_to_string("/proc/1/net/dev")
        .expect("read root net/dev")
        .lines()
        .any(|l| l.trim_start().starts_with(&format!("{ifname}:")))
}

#[test]
fn two_namespaces_joined_by_a_veth_can_ping() {
    let a = Netns::new("ping-a").unwrap();
    let b = Netns::new("ping-b").unwrap();
    let wire = Veth::named(&a, "eth1", &b, "eth1").unwrap();
    a.add_address("eth1", "192.0.2.1/30").unwrap();
    b.add_address("eth1", "192.0.2.2/30").unwrap();
    wire.set_up().unwrap();
    assert!(ping(&a, "192.0.2.2"));
    assert!(ping(&b, "192.0.2.1"));
}

#[test]
fn mac_and_mtu_are_set_and_read_back() {
    let a = Netns::new("mac-a").unwrap();
    let b = Netns::new("mac-b").unwrap();
    let wire = Veth::new(&a, &b).unwrap();
    let mac = [0x02, 0, 0, 0xab, 0xcd, 0xef];
    a.set_mac(wire.a_name(), mac).unwrap();
    wire.set_mtu(9000).unwrap();
    wire.set_up().unwrap();
    let state = a.link_state(wire.a_name()).unwrap();
    assert_eq!((state.mac, state.mtu, state.up), (mac, 9000, true));
    assert_eq!(b.link_state(wire.b_name()).unwrap().mtu, 9000);
    assert!(a.link_state("nope0").is_err());
}

#[test]
fn an_end_moved_to_a_third_namespace_works_there() {
    let a = Netns::new("move-a").unwrap();
    let b = Netns::new("move-b").unwrap();
    let c = Netns::new("move-c").unwrap();
    let mut wire = Veth::new(&a, &b).unwrap();
    wire.move_b(&c).unwrap();
    assert!(!b.links().unwrap().contains(&wire.b_name().to_owned()));
    assert!(c.links().unwrap().contains(&wire.b_name().to_owned()));
    a.add_address(wire.a_name(), "198.51.100.1/24").unwrap();
    c.add_address(wire.b_name(), "198.51.100.2/24").unwrap();
    wire.set_up().unwrap();
    assert!(ping(&a, "198.51.100.2"));
}

#[test]
fn commands_and_closures_run_inside_the_namespace() {
    let a = Netns::new("exec-a").unwrap();
    let b = Netns::new("exec-b").unwrap();
    let wire = Veth::new(&a, &b).unwrap();
    let out = a
        .exec(Command::new("cat").arg("/proc/self/net/dev"))
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("{}:", wire.a_name())), "{text}");
    assert!(!text.contains(&format!("{}:", wire.b_name())), "{text}");
    let seen = a
        .run(|| std::fs::read_to_string("/proc/thread-self/net/dev").unwrap())
        .unwrap();
    assert!(seen.contains(wire.a_name()));
}

#[test]
fn a_spawned_process_is_killed_when_its_guard_drops() {
    let a = Netns::new("spawn").unwrap();
    let mut child = a.spawn(Command::new("sleep").arg("60")).unwrap();
    let pid = child.child().id();
    assert!(PathBuf::from(format!("/proc/{pid}")).exists());
    drop(child);
    // Reaped by the guard, so the pid is gone (or reused by an unrelated process).
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    assert!(!cmdline.starts_with(b"sleep"));
}

#[test]
fn a_panicking_test_leaves_no_namespace_and_no_interface_behind() {
    struct Seen {
        ns_paths: Vec<PathBuf>,
        ifnames: Vec<String>,
        ns_fds: Vec<File>,
    }
    let seen: Mutex<Option<Seen>> = Mutex::new(None);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let a = Netns::new("panic-a").unwrap();
        let b = Netns::new("panic-b").unwrap();
        let wire = Veth::new(&a, &b).unwrap();
        let _sleeper = a.spawn(Command::new("sleep").arg("60")).unwrap();
        *seen.lock().unwrap() = Some(Seen {
            ns_paths: vec![a.path().to_owned(), b.path().to_owned()],
            ifnames: vec![wire.a_name().to_owned(), wire.b_name().to_owned()],
            // Held past the panic so the test can look inside both namespaces afterwards
            // (they also keep the pair alive, so only the Veth guard can have removed it).
            ns_fds: vec![File::open(a.path()).unwrap(), File::open(b.path()).unwrap()],
        });
        a.run(|| panic!("deliberate panic inside the namespace"))
            .unwrap();
    }));
    assert!(outcome.is_err(), "the closure must have panicked");
    let seen = seen.into_inner().unwrap().expect("the test bed was built");
    for path in &seen.ns_paths {
        assert!(!path.exists(), "{} left behind", path.display());
    }
    for name in &seen.ifnames {
        for fd in &seen.ns_fds {
            assert!(!exists_in(fd, name), "{name} still in a test namespace");
        }
        assert!(!root_has(name), "{name} in the root namespace");
    }
}

#[test]
fn namespaces_made_in_parallel_get_distinct_names() {
    let names: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| Netns::new("par").map(|ns| ns.name().to_owned())))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
    let deadline = Instant::now() + Duration::from_secs(5);
    while names
        .iter()
        .any(|n| PathBuf::from("/run/netns").join(n).exists())
    {
        assert!(Instant::now() < deadline, "namespaces not removed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let a = Netns::new("bad").unwrap();
    assert!(a.set_up("does-not-exist").is_err());
    assert!(a.add_address("lo", "not-a-cidr").is_err());
    let err = a.delete_link("does-not-exist").unwrap_err();
    assert!(err.to_string().contains("does-not-exist"), "{err}");
}

#[test]
fn namespaces_of_dead_test_processes_are_swept() {
    // No process can have this pid: it is above the kernel's largest pid_max (2^22).
    let stale = PathBuf::from("/run/netns/xwt-stale-4294967-0");
    let live = Netns::new("live").unwrap();
    File::create(&stale).unwrap();
    sweep_stale_namespaces();
    let stale_gone = !stale.exists();
    let _ = std::fs::remove_file(&stale);
    assert!(stale_gone, "a dead process's namespace was not swept");
    assert!(live.path().exists(), "a live process's namespace was swept");
}

#[test]
fn raw_sockets_carry_whole_frames_and_see_only_arrivals() {
    let a = Netns::new("raw-a").unwrap();
    let b = Netns::new("raw-b").unwrap();
    let wire = Veth::new(&a, &b).unwrap();
    wire.set_up().unwrap();
    a.set_tx_checksum(wire.a_name(), false).unwrap();
    assert!(a.set_tx_checksum("nope0", false).is_err());
    let sa = xwire_testbed::RawSocket::open(&a, wire.a_name()).unwrap();
    let sb = xwire_testbed::RawSocket::open(&b, wire.b_name()).unwrap();
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
    frame.resize(100, 0x5a);
    sa.send(&frame).unwrap();
    assert_eq!(sb.recv(Duration::from_secs(2)).unwrap(), Some(frame));
    assert_eq!(
        sa.recv(Duration::from_millis(100)).unwrap(),
        None,
        "its own frame is not an arrival"
    );
}

#[test]
fn a_raw_socket_counts_what_its_full_buffer_dropped_apart_from_what_it_read() {
    // Far more than any receive buffer the kernel allows here holds (8 MiB at most,
    // about 1 KiB a frame), sent while nobody reads.
    const FRAMES: u64 = 30_000;
    let a = Netns::new("rawdrop-a").unwrap();
    let b = Netns::new("rawdrop-b").unwrap();
    let wire = Veth::new(&a, &b).unwrap();
    wire.set_up().unwrap();
    let sa = xwire_testbed::RawSocket::open(&a, wire.a_name()).unwrap();
    let sb = xwire_testbed::RawSocket::open(&b, wire.b_name()).unwrap();
    assert_eq!(sb.take_drops().unwrap(), 0);
    let mut frame = vec![0xff; 6];
    frame.extend_from_slice(&[2, 0, 0, 0, 0, 2, 0x88, 0xb5]);
    frame.resize(96, 0x5a);
    for _ in 0..FRAMES {
        sa.send(&frame).unwrap();
    }
    let dropped = sb.take_drops().unwrap();
    let mut read = 0;
    while let Some(got) = sb.recv(Duration::from_millis(200)).unwrap() {
        read += u64::from(got == frame);
    }
    let arrived = b.link_stats(wire.b_name()).unwrap().rx_packets;
    assert!(dropped > 0, "a buffer of {read} frames took all {FRAMES}");
    assert!(
        arrived >= FRAMES,
        "{arrived} of {FRAMES} reached the interface"
    );
    // The new link's own few frames (neighbour discovery) may be among those dropped.
    assert!(
        (FRAMES..FRAMES + 8).contains(&(read + dropped)),
        "read {read}, dropped {dropped}"
    );
    assert_eq!(sb.take_drops().unwrap(), 0, "a count is taken once");
}

/// What podman (containers/common) does before it mounts a namespace of its own: make
/// /run/netns a shared mount, bind-mounting it onto itself first when it is not a mount
/// point yet. A namespace the test bed made before that must still be removed whole.
#[test]
fn a_namespace_made_before_another_tool_remounts_the_netns_directory_is_still_removed() {
    use nix::mount::{mount, MsFlags};
    let ns = Netns::new("remount").unwrap();
    let path = ns.path().to_owned();
    let shared = || {
        mount(
            None::<&str>,
            "/run/netns",
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    if shared() == Err(nix::Error::EINVAL) {
        mount(
            Some("/run/netns"),
            "/run/netns",
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .unwrap();
        shared().unwrap();
    }
    drop(ns);
    assert!(
        !path.exists(),
        "{} was left behind (its mount is hidden under a remount of /run/netns)",
        path.display()
    );
}
