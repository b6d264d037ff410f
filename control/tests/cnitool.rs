//! CHECK through a libcni client (podman never sends CHECK): a small runner built from
//! Debian's libcni source drives ADD, CHECK and DEL of a chain ptp + host-local + xwire
//! inside a node namespace, and CHECK reports what was broken after ADD.

mod support;

use std::process::{Command, Output};

use support::{build_cnitool, pair_topology, plugin_bin, start_node, Pod, TempDir};

#[test]
fn check_through_libcni_finds_a_broken_link() {
    let node = start_node("n1", "");
    node.apply(&pair_topology(
        "r1",
        "r2",
        &[(0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30")],
    ));
    let work = TempDir::new("cnitool");
    let cnitool = build_cnitool(&work.0);
    let bin = work.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(plugin_bin(), bin.join("xwire")).unwrap();
    let conflist = work.0.join("net.conflist");
    std::fs::write(
        &conflist,
        format!(
            r#"{{"cniVersion": "1.0.0", "name": "ptpnet", "plugins": [
  {{"type": "ptp", "ipMasq": false,
    "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "10.199.81.0/24"}}]],
             "dataDir": "{data}"}}}},
  {{"type": "xwire", "socket": "{socket}", "namespace": "lab"}}
]}}"#,
            data = work.0.join("ipam").display(),
            socket = node.socket.display()
        ),
    )
    .unwrap();
    let cni = |command: &str, pod: &Pod| -> Output {
        let mut cmd = Command::new(&cnitool);
        cmd.args([command, conflist.to_str().unwrap(), &pod.netns()])
            .env("CNI_CONTAINERID", &pod.container)
            .env(
                "CNI_ARGS",
                format!("IgnoreUnknown=1;K8S_POD_NAME={}", pod.name),
            )
            .env("CNI_PATH", format!("{}:/usr/lib/cni", bin.display()))
            .env("CNI_CACHE_DIR", work.0.join("cache"));
        node.ns.exec(&mut cmd).unwrap()
    };
    let text = |o: &Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    for pod in [&r1, &r2] {
        let added = cni("add", pod);
        assert!(added.status.success(), "{}", text(&added));
    }
    let added = cni("add", &Pod::new("r3"));
    assert!(
        added.status.success(),
        "a pod in no topology passes: {}",
        text(&added)
    );
    assert!(r1.has("eth0") && r1.has("eth1"));
    for pod in [&r1, &r2] {
        let checked = cni("check", pod);
        assert!(checked.status.success(), "{}", text(&checked));
    }

    r1.ns
        .exec(Command::new("ip").args(["addr", "del", "10.0.0.1/30", "dev", "eth1"]))
        .unwrap();
    let checked = cni("check", &r1);
    assert!(!checked.status.success());
    assert!(
        text(&checked).contains("lacks the address 10.0.0.1/30"),
        "{}",
        text(&checked)
    );
    r2.ns
        .exec(Command::new("ip").args(["link", "set", "eth1", "down"]))
        .unwrap();
    let checked = cni("check", &r2);
    assert!(
        text(&checked).contains("eth1 is down"),
        "{}",
        text(&checked)
    );

    for pod in [&r1, &r2] {
        let deleted = cni("del", pod);
        assert!(deleted.status.success(), "{}", text(&deleted));
    }
    let state = node.state();
    assert!(
        state.attachments.is_empty() && state.wires.is_empty(),
        "{state:?}"
    );
}
