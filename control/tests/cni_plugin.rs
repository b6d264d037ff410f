//! The plugin called as a runtime calls it (environment and stdin) against a real daemon
//! and real network namespaces: same-node wires, every command, every error code, and
//! that a failed call leaves nothing behind.

mod support;

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use support::{call, eventually, failed_check, pair_topology, plugin, plugin_raw, start_node, Pod};
use xwire_proto::local::codes;
use xwire_testbed::checks::ping;

const R1_R2: &[(u64, &str, &str, &str, &str)] =
    &[(0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30")];

/// A node with r1 and r2 attached, joined by one veth (`R1_R2`): the node, the pods, and
/// the network configuration of `version` they were added with.
fn node_with_pair(version: &str) -> (support::Node, Pod, Pod, serde_json::Value) {
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config(version);
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    assert_eq!(call(&r2, "ADD", &config).code, 0);
    (node, r1, r2, config)
}

#[test]
fn same_node_pods_get_a_veth_in_either_order_and_lose_it_on_del() {
    let node = start_node("n1", "");
    let topology = pair_topology("r1", "r2", R1_R2).replace(
        "local_ip: 10.0.0.1/30,",
        "local_ip: 10.0.0.1/30, mtu: 1500,",
    );
    node.apply(&topology);
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");

    // r1 first: its peer is not up, so its link waits.
    let added = call(&r1, "ADD", &config);
    assert_eq!(added.code, 0, "{}", added.output);
    assert!(!r1.has("eth1"));
    assert_eq!(node.wire_state("r1", 0).as_deref(), Some("pending"));

    let mut reporting = config.clone();
    reporting["reportIPs"] = json!(true);
    let added = call(&r2, "ADD", &reporting);
    assert_eq!(added.code, 0, "{}", added.output);
    assert_eq!(added.output["interfaces"][0]["name"], "eth1");
    assert_eq!(added.output["interfaces"][0]["sandbox"], r2.netns());
    assert_eq!(added.output["ips"][0]["address"], "10.0.0.2/30");
    assert!(r1.has("eth1") && r2.has("eth1"));
    assert_eq!(node.wire_state("r1", 0).as_deref(), Some("veth"));
    assert!(ping(&r1.ns, "10.0.0.2", 2).unwrap());
    assert_eq!(call(&r1, "CHECK", &config).code, 0);

    // CHECK names what is wrong.
    r1.ns.set_mtu("eth1", 1400).unwrap();
    let msg = failed_check(&r1, &config);
    assert!(msg.contains("MTU 1400"), "{msg}");

    // DEL of r1 takes the wire; r2's end waits for r1 again, which comes back on ADD.
    assert_eq!(call(&r1, "DEL", &config).code, 0);
    assert!(!r1.has("eth1") && !r2.has("eth1"));
    assert_eq!(node.wire_state("r1", 0), None);
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("pending"));
    assert_eq!(call(&r1, "DEL", &config).code, 0, "DEL is idempotent");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    assert!(ping(&r2.ns, "10.0.0.1", 1).unwrap());

    for pod in [&r1, &r2] {
        assert_eq!(call(pod, "DEL", &config).code, 0);
    }
    let state = node.state();
    assert!(
        state.attachments.is_empty() && state.wires.is_empty(),
        "{state:?}"
    );
}

#[test]
fn links_follow_a_running_topology() {
    let (node, r1, r2, config) = node_with_pair("1.0.0");

    let two = [R1_R2[0], (1, "eth2", "10.0.1.1/30", "eth2", "10.0.1.2/30")];
    node.apply(&pair_topology("r1", "r2", &two));
    assert!(r1.has("eth2") && r2.has("eth2"));
    assert!(ping(&r1.ns, "10.0.1.2", 1).unwrap());
    assert_eq!(call(&r2, "CHECK", &config).code, 0);

    node.apply(&pair_topology("r1", "r2", &two[1..]));
    assert!(!r1.has("eth1") && !r2.has("eth1"));
    assert!(r1.has("eth2"));
    assert_eq!(node.wire_state("r1", 0), None);
    assert_eq!(call(&r1, "CHECK", &config).code, 0);
}

#[test]
fn pods_in_no_topology_pass_through_untouched() {
    let node = start_node("n1", "");
    let pod = Pod::new("web");
    let mut config = node.net_config("1.0.0");
    let prev = json!({"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": pod.netns()}],
                      "ips": [{"address": "10.199.77.5/24", "interface": 0}], "dns": {}});
    config["prevResult"] = prev.clone();
    let added = call(&pod, "ADD", &config);
    assert_eq!((added.code, &added.output), (0, &prev));
    assert_eq!(call(&pod, "CHECK", &config).code, 0);
    assert_eq!(call(&pod, "DEL", &config).code, 0);
    assert!(node.state().attachments.is_empty());
}

#[test]
fn chained_results_append_to_prev_result_in_the_asked_version() {
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let mut config = node.net_config(version);
        config["reportIPs"] = json!(true);
        config["prevResult"] = json!({"cniVersion": version, "interfaces": [{"name": "eth0"}],
                                      "ips": [{"address": "10.199.77.5/24", "interface": 0, "version": "4"}]});
        assert_eq!(call(&r1, "ADD", &config).code, 0);
        let added = call(&r2, "ADD", &config);
        assert_eq!(added.code, 0, "{version}: {}", added.output);
        let out = &added.output;
        assert_eq!(out["cniVersion"], version);
        assert_eq!(out["interfaces"][1]["name"], "eth1", "{version}: {out}");
        assert_eq!(out["ips"][1]["interface"], 1, "{version}: {out}");
        assert_eq!(
            out["ips"][1].get("version").is_some(),
            version.starts_with('0'),
            "{version}: {out}"
        );
        assert_eq!(
            out["interfaces"][1].get("mtu").is_some(),
            version == "1.1.0",
            "{version}: {out}"
        );
        assert_eq!(call(&r1, "DEL", &config).code, 0);
        assert_eq!(call(&r2, "DEL", &config).code, 0);
    }
    let version = plugin("VERSION", &[], &json!({"cniVersion": "1.0.0"}));
    assert_eq!(version.code, 0);
    assert_eq!(
        version.output["supportedVersions"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn malformed_calls_get_the_right_error_and_change_nothing() {
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let r1 = Pod::new("r1");
    let netns = r1.netns();
    let env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", "K8S_POD_NAME=r1"),
    ];
    let code = |o: support::Outcome| {
        assert!(
            o.output["msg"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            o.output
        );
        o.error_code()
    };
    let config = node.net_config("1.0.0");
    // 6: stdin is not JSON.
    assert_eq!(code(plugin_raw("ADD", &env, b"{not json")), Some(6));
    // 7: no name; a socket that is not a string.
    let mut bad = config.clone();
    bad.as_object_mut().unwrap().remove("name");
    assert_eq!(code(plugin("ADD", &env, &bad)), Some(7));
    let mut bad = config.clone();
    bad["socket"] = json!(5);
    assert_eq!(code(plugin("ADD", &env, &bad)), Some(7));
    // 1: a version the plugin does not speak.
    assert_eq!(
        code(plugin("ADD", &env, &node.net_config("0.2.0"))),
        Some(1)
    );
    // 4: no netns; a netns path that is not one; no pod name; no command.
    assert_eq!(code(plugin("ADD", &env[..0], &config)), Some(4));
    let missing = [
        env[0],
        ("CNI_NETNS", "/run/netns/xwire-no-such-ns"),
        env[2],
        env[3],
    ];
    assert_eq!(code(plugin("ADD", &missing, &config)), Some(4));
    // A FIFO (opening it for reading would wait for a writer forever) and a namespace
    // of another kind: refused at once, and the daemon goes on answering.
    let dir = support::TempDir::new("fifo");
    let fifo = dir.0.join("netns");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for path in [fifo.to_str().unwrap(), "/proc/self/ns/mnt"] {
        let started = std::time::Instant::now();
        let odd = [env[0], ("CNI_NETNS", path), env[2], env[3]];
        assert_eq!(code(plugin("ADD", &odd, &config)), Some(4), "{path}");
        assert!(started.elapsed() < Duration::from_secs(10), "{path}");
    }
    let anonymous = [env[0], env[1], env[2], ("CNI_ARGS", "IgnoreUnknown=1")];
    assert_eq!(code(plugin("ADD", &anonymous, &config)), Some(4));
    assert_eq!(code(plugin("FROB", &env, &config)), Some(4));
    // 4: an interface name with a path in it, or longer than the kernel takes.
    for ifname in ["../x", "sixteen-bytes-xx"] {
        let odd = [env[0], env[1], ("CNI_IFNAME", ifname), env[3]];
        assert_eq!(code(plugin("ADD", &odd, &config)), Some(4), "{ifname}");
    }
    // 7: a configuration larger than the daemon takes in one call, refused unread.
    let mut huge = config.clone();
    huge["padding"] = json!("x".repeat(xwire_proto::local::MAX_LOCAL_BODY));
    assert_eq!(code(plugin("ADD", &env, &huge)), Some(7));
    // 11: ADD with the daemon unreachable; 50: STATUS likewise.
    let mut away = config.clone();
    away["socket"] = json!("/run/xwire-test-no-daemon.sock");
    assert_eq!(code(plugin("ADD", &env, &away)), Some(11));
    away["cniVersion"] = json!("1.1.0");
    assert_eq!(code(plugin("STATUS", &[], &away)), Some(50));
    assert_eq!(plugin("STATUS", &[], &node.net_config("1.1.0")).code, 0);
    // CHECK of a pod the daemon never attached.
    assert_eq!(
        code(plugin("CHECK", &env, &config)),
        Some(u64::from(codes::UNKNOWN_CONTAINER))
    );

    let state = node.state();
    assert!(
        state.attachments.is_empty() && state.wires.is_empty(),
        "{state:?}"
    );
    assert_eq!(r1.ns.links().unwrap(), ["lo"]);

    // Every call is in the node's plugin log, one JSON line each, with its error code.
    let log = std::fs::read_to_string(node.dir.0.join("cni.log")).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let unreachable = lines
        .iter()
        .find(|l| l["code"] == 11)
        .expect("the unreachable daemon's ADD is logged");
    assert_eq!(unreachable["command"], "ADD");
    assert_eq!(unreachable["pod"], "r1");
    assert_eq!(unreachable["container_id"], "c1");
    assert!(lines
        .iter()
        .any(|l| l["command"] == "STATUS" && l["result"] == "ok"));
}

#[test]
fn a_failed_add_undoes_every_step() {
    let node = start_node("n1", "");
    let links = [
        (0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30"),
        (1, "eth2", "10.0.1.1/30", "eth2", "10.0.1.2/30"),
    ];
    node.apply(&pair_topology("r1", "r2", &links));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.0.0");
    assert_eq!(call(&r2, "ADD", &config).code, 0);
    // r1 already has an eth2 (another plugin's): the first link is made, the second
    // fails, and the first is undone.
    r1.ns
        .exec(std::process::Command::new("ip").args([
            "link", "add", "eth2", "type", "veth", "peer", "name", "other2",
        ]))
        .unwrap();
    let failed = call(&r1, "ADD", &config);
    assert_eq!(
        failed.error_code(),
        Some(u64::from(codes::INTERFACE_EXISTS)),
        "{}",
        failed.output
    );
    assert!(failed.output["msg"].as_str().unwrap().contains("eth2"));
    assert!(!r1.has("eth1") && !r2.has("eth1") && !r2.has("eth2"));
    assert!(r1.has("eth2"), "the other plugin's interface stays");
    assert_eq!(node.state().attachments.len(), 1);
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("pending"));
    assert_eq!(node.wire_state("r1", 0), None);
}

#[test]
fn gc_removes_attachments_the_runtime_no_longer_holds() {
    let (node, r1, r2, config) = node_with_pair("1.1.0");
    let mut gc = config.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": r2.container, "ifname": "eth0"}]);
    assert_eq!(plugin("GC", &[], &gc).code, 0);
    let state = node.state();
    assert_eq!(state.attachments.len(), 1);
    assert_eq!(state.attachments[0]["pod"]["name"], "r2");
    assert!(!r1.has("eth1") && !r2.has("eth1"));
}

#[test]
fn gc_without_the_list_of_valid_attachments_is_refused_and_removes_nothing() {
    let (node, r1, r2, config) = node_with_pair("1.1.0");
    let refused = plugin("GC", &[], &config);
    assert_eq!(refused.code, 1);
    assert_eq!(
        refused.output["code"],
        codes::INVALID_CONFIG,
        "{}",
        refused.output
    );
    assert_eq!(node.state().attachments.len(), 2);
    assert!(r1.has("eth1") && r2.has("eth1"));
}

#[test]
fn del_leaves_an_interface_of_the_same_name_that_xwire_did_not_make() {
    let (node, r1, _r2, config) = node_with_pair("1.1.0");
    // The wire's veth goes, and another plugin (or the container) makes an eth1 of its own.
    for command in [
        vec!["link", "del", "eth1"],
        vec![
            "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p",
        ],
    ] {
        let out = r1
            .ns
            .exec(std::process::Command::new("ip").args(command))
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    assert!(r1.has("eth1"));
    assert_eq!(call(&r1, "DEL", &config).code, 0);
    assert!(r1.has("eth1"), "xwire deleted an eth1 it did not make");
    assert!(node.state().attachments.len() == 1);
}

#[test]
fn an_add_with_another_pods_container_id_is_refused_and_that_pod_keeps_its_wires() {
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let (r1, mut r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    r2.container = r1.container.clone();
    let refused = call(&r2, "ADD", &config);
    assert_eq!(
        refused.error_code(),
        Some(u64::from(codes::POD_ALREADY_ATTACHED)),
        "{}",
        refused.output
    );
    let state = node.state();
    assert_eq!(state.attachments.len(), 1);
    assert_eq!(state.attachments[0]["pod"]["name"], "r1");
    assert_eq!(node.wire_state("r1", 0).as_deref(), Some("pending"));
}

#[test]
fn version_needs_no_stdin_and_no_command_says_what_the_plugin_is() {
    use std::process::{Command, Stdio};
    let run = |command: Option<&str>| {
        let mut plugin = Command::new(support::plugin_bin());
        plugin
            .env_clear()
            // A pipe nobody writes to or closes: a plugin that reads it waits forever.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(command) = command {
            plugin.env("CNI_COMMAND", command);
        }
        let mut child = plugin.spawn().unwrap();
        let stdin = child.stdin.take();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the plugin ({command:?}) waited for stdin");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(stdin);
        child.wait_with_output().unwrap()
    };
    let version = run(Some("VERSION"));
    assert!(version.status.success());
    let answer: serde_json::Value = serde_json::from_slice(&version.stdout).unwrap();
    assert_eq!(answer["supportedVersions"].as_array().unwrap().len(), 5);

    let about = run(None);
    assert!(about.status.success());
    let text = String::from_utf8_lossy(&about.stderr);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("xwire CNI plugin"), "{text}");
    assert!(about.stdout.is_empty());

    // And with stdin at its end, as `CNI_COMMAND=VERSION xwire </dev/null`.
    let empty = plugin_raw("VERSION", &[], b"");
    assert_eq!(empty.code, 0, "{}", empty.output);
    assert!(empty.output["supportedVersions"].is_array());
}

#[test]
fn del_succeeds_with_the_daemon_down_and_the_daemon_forgets_gone_pods() {
    let (mut node, r1, r2, config) = node_with_pair("1.0.0");
    r1.ns
        .exec(std::process::Command::new("ip").args([
            "link", "add", "keepme", "type", "veth", "peer", "name", "keepme2",
        ]))
        .unwrap();

    node.stop();
    assert_eq!(call(&r1, "DEL", &config).code, 0);
    assert!(!r1.has("eth1") && !r2.has("eth1"));
    assert!(r1.has("keepme"), "only xwire's interfaces go");
    let no_netns = plugin(
        "DEL",
        &[("CNI_CONTAINERID", "c9"), ("CNI_IFNAME", "eth0")],
        &config,
    );
    assert_eq!(no_netns.code, 0);

    let r1_name = r1.name.clone();
    drop(r1);
    node.restart();
    assert!(
        eventually(Duration::from_secs(5), || node
            .state()
            .attachments
            .iter()
            .all(|a| a["pod"]["name"] != r1_name.as_str())),
        "{:?}",
        node.state()
    );
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("pending"));
}

#[test]
fn a_bad_topology_is_refused_and_stores_nothing() {
    use xwire_proto::local::{Request, Response, TopologyApply, TopologyQuery};
    let node = start_node("n1", "");
    let mut objects: Vec<serde_json::Value> = topology_json(&pair_topology("r1", "r2", R1_R2));
    objects[1]["spec"]["links"][0]["peer_intf"] = json!("eth7");
    let refused = node
        .ask(&Request::TopologyApply(TopologyApply { objects }))
        .unwrap();
    let Response::Error(e) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!(e.code, codes::TOPOLOGY_INVALID);
    assert!(e.msg.contains("do not describe the same wire"), "{}", e.msg);
    let got = node
        .ask(&Request::TopologyGet(TopologyQuery::default()))
        .unwrap();
    assert_eq!(got, Response::Topologies { objects: vec![] });
}

/// The topology's objects as JSON, through the same parser `xwirectl` uses.
fn topology_json(yaml: &str) -> Vec<serde_json::Value> {
    xwire_model::topology::parse(yaml)
        .unwrap()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect()
}

#[test]
fn a_pod_with_the_longest_name_kubernetes_allows_is_wired_and_deleted_like_any() {
    // Kubernetes allows 253-character pod names; xwire labels each of a pod's interfaces
    // with its namespace, name and link uid, and the kernel keeps 255 bytes of a label:
    // such a pod's name is hashed in its labels.
    let node = start_node("n1", "");
    let long = format!("r{}", "x".repeat(252));
    node.apply(&pair_topology(&long, "r2", R1_R2));
    // r2 first, so that the long-named pod's ADD makes the wires' interfaces.
    let r2 = Pod::new("r2");
    let config = node.net_config("1.0.0");
    assert_eq!(call(&r2, "ADD", &config).code, 0);
    let holder = Pod::new("rlong");
    let netns = holder.netns();
    let args = format!("K8S_POD_NAME={long}");
    let env = [
        ("CNI_CONTAINERID", "c1"),
        ("CNI_NETNS", netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_ARGS", args.as_str()),
    ];
    let out = plugin("ADD", &env, &config);
    assert_eq!(out.code, 0, "{}", out.output);
    assert!(holder.has("eth1"), "{}", out.output);
    assert!(ping(&holder.ns, "10.0.0.2", 3).unwrap());
    assert_eq!(plugin("CHECK", &env, &config).code, 0);
    let state = node.state();
    assert_eq!(state.attachments.len(), 2, "{state:?}");
    // DEL takes its interface (and so the veth) and its records, and nothing of r2's.
    assert_eq!(plugin("DEL", &env, &config).code, 0);
    assert_eq!(holder.ns.links().unwrap(), ["lo"]);
    assert!(!r2.has("eth1"));
    assert_eq!(node.state().attachments.len(), 1);
}

#[test]
fn a_netns_that_is_the_nodes_the_daemons_or_the_hosts_is_refused_and_nothing_recorded() {
    // CNI_NETNS is opened by the daemon: `/proc/self/ns/net` names the daemon's own
    // namespace there, whoever wrote it. None of these is a pod's.
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let config = node.net_config("1.1.0");
    let node_path = node.ns.path().display().to_string();
    // (The host's, /proc/1/ns/net, is refused too where the daemon may open it; the
    // machine this runs on may deny that to everyone.)
    for netns in ["/proc/self/ns/net", node_path.as_str()] {
        let env = [
            ("CNI_CONTAINERID", "c-hostile"),
            ("CNI_NETNS", netns),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "K8S_POD_NAME=r1"),
        ];
        let out = plugin("ADD", &env, &config);
        assert_eq!(
            out.error_code(),
            Some(u64::from(codes::INVALID_ENVIRONMENT)),
            "{netns}: {}",
            out.output
        );
        // /proc/self/ns/net is also the caller's own, not the daemon's, which is said
        // first.
        let msg = out.output["msg"].as_str().unwrap_or_default();
        assert!(
            msg.contains("not a pod's") || msg.contains("for the daemon than for its caller"),
            "{netns}: {msg}"
        );
    }
    assert!(node.state().attachments.is_empty());
    assert!(!node
        .ns
        .links()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("eth")));
    // A pod's own namespace is taken as before.
    let r1 = Pod::new("r1");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
}

#[test]
fn a_netns_path_that_names_another_namespace_for_the_caller_is_refused() {
    // The runtime sees its own mounts: in its mount namespace, r2's netns file is bound
    // over r1's path. The daemon, which sees r1's, would wire a pod the runtime did not
    // mean; the plugin sends the namespace it opened, and the daemon compares.
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let (r1_path, r2_path) = (r1.netns(), r2.netns());
    let config = node.net_config("1.1.0");
    let script = format!(
        "mount --bind {r2_path} {r1_path} && exec {}",
        support::plugin_bin().display()
    );
    let mut child = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("CNI_COMMAND", "ADD")
        .env("CNI_CONTAINERID", "c-r1")
        .env("CNI_NETNS", &r1_path)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/nonexistent")
        .env("CNI_ARGS", "K8S_POD_NAME=r1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(config.to_string().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert!(!out.status.success(), "{answer}");
    assert_eq!(
        answer["code"].as_u64(),
        Some(u64::from(codes::INVALID_ENVIRONMENT)),
        "{answer}"
    );
    let msg = answer["msg"].as_str().unwrap_or_default();
    assert!(msg.contains("for the daemon than for its caller"), "{msg}");
    assert!(node.state().attachments.is_empty());
    assert_eq!(r1.ns.links().unwrap(), ["lo"]);
    assert_eq!(r2.ns.links().unwrap(), ["lo"]);
    // Without the bind, the same call wires r1.
    assert_eq!(call(&r1, "ADD", &config).code, 0);
}

/// The interfaces of the namespace that `/run/netns/NAME` names now (not the one a
/// test's `Netns` holds open).
fn links_at(name: &str) -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["-n", name, "-o", "link", "show"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_owned())
        .collect()
}

#[test]
fn a_pod_netns_path_that_comes_to_name_another_namespace_is_not_wired_into() {
    // A pod's CNI_NETNS is opened again after its ADD: a peer pod's ADD makes the veth's
    // other end in it. A `/proc/<pid>/ns/net` path names another namespace once its
    // process died and its pid was reused; here r1's `/run/netns` name is removed and
    // made again, which gives the same path to a new namespace.
    let node = start_node("n1", "");
    node.apply(&pair_topology("r1", "r2", R1_R2));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    let name = r1.ns.name().to_owned();
    let ip = |args: &[&str]| {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    ip(&["netns", "del", &name]);
    ip(&["netns", "add", &name]);
    assert_eq!(links_at(&name), ["lo"]);

    // r2's ADD finds r1's path naming another namespace: its end waits, and nothing is
    // made in the stranger's namespace.
    let added = call(&r2, "ADD", &config);
    assert_eq!(added.code, 0, "{}", added.output);
    assert_eq!(
        links_at(&name),
        ["lo"],
        "an interface was made in another namespace"
    );
    assert!(!r2.has("eth1"));
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("pending"));

    // The runtime's ADD of r1 at that path (the same container id) is a new container
    // in the namespace the path names now: the wire is made there.
    let added = call(&r1, "ADD", &config);
    assert_eq!(added.code, 0, "{}", added.output);
    assert!(
        links_at(&name).contains(&"eth1".to_owned()),
        "{:?}",
        links_at(&name)
    );
    assert!(r2.has("eth1"));
    assert_eq!(node.wire_state("r2", 0).as_deref(), Some("veth"));
}

/// `pods` Topology objects of namespace `ring`, a ring with an address pair on every
/// link, as YAML documents. Pod names are long (Kubernetes allows 253 bytes) so that a
/// list over 1 MiB needs fewer pods.
fn ring_topology(pods: usize) -> String {
    let name = |i: usize| format!("{i:04}-{}", "r".repeat(200));
    let address = |link: usize, end: usize| {
        format!("10.{}.{}.{}/30", link / 64, 0, (link % 64) * 4 + 1 + end)
    };
    let mut text = String::new();
    for i in 0..pods {
        let (prev, next) = ((i + pods - 1) % pods, (i + 1) % pods);
        text += &format!(
            "---\napiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {}, namespace: ring}}\nspec:\n  links:\n  - {{uid: {i}, peer_pod: {}, local_intf: eth1, peer_intf: eth2, local_ip: {}, peer_ip: {}}}\n  - {{uid: {prev}, peer_pod: {}, local_intf: eth2, peer_intf: eth1, local_ip: {}, peer_ip: {}}}\n",
            name(i),
            name(next),
            address(i, 0),
            address(i, 1),
            name(prev),
            address(prev, 1),
            address(prev, 0),
        );
    }
    text
}

#[test]
fn a_topology_list_over_what_one_call_takes_is_applied_whole() {
    // 1,300 pods with an address pair on every link and long names: about 1.3 MB of
    // JSON, over the 1 MiB that one local API call takes. `xwirectl topology apply` (and `lab up`,
    // which sends the same list) ended in "Broken pipe"; the list now goes in pieces.
    let node = start_node("n1", "");
    let dir = support::TempDir::new("big-topology");
    let file = dir.0.join("ring.yaml");
    let text = ring_topology(1300);
    let json: usize = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| {
            serde_json::to_vec(&serde_json::Value::deserialize(doc).unwrap())
                .unwrap()
                .len()
        })
        .sum();
    assert!(
        json > xwire_proto::local::MAX_LOCAL_BODY,
        "only {json} bytes of JSON"
    );
    std::fs::write(&file, text).unwrap();
    let apply = |file: &std::path::Path| xwirectl_topology(&node.socket, &["apply"], file);
    let out = apply(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(" applied")).count(),
        1300
    );
    let got = std::process::Command::new(support::xwirectl_bin())
        .arg("--socket")
        .arg(&node.socket)
        .args(["topology", "get", "--namespace", "ring", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let objects: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(objects.as_array().map(Vec::len), Some(1300));

    // One object over the cap alone cannot be cut: it is refused with its size.
    let mut huge = String::from(
        "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {name: big, namespace: ring2}\nspec:\n  links:\n",
    );
    for uid in 0..20_000 {
        huge +=
            &format!("  - {{uid: {uid}, peer_pod: p{uid}, local_intf: e{uid}, peer_intf: eth1}}\n");
    }
    let file = dir.0.join("huge.yaml");
    std::fs::write(&file, huge).unwrap();
    let out = apply(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("over the 1048576 bytes the daemon takes in one call"),
        "{stderr}"
    );
}

#[test]
fn a_kne_users_file_applies_its_topologies_and_lists_the_rest_and_a_host_link_is_refused() {
    // The project's own KNE example (a Namespace, three Topology objects and three
    // Pods), given with -f as kubectl takes it.
    let node = start_node("n1", "");
    let kne = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kind/kne-lab.yaml");
    let apply = |file: &std::path::Path| xwirectl_topology(&node.socket, &["apply", "-f"], file);
    let out = apply(&kne);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let applied: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        applied,
        [
            "topology/kne-lab/r1 applied",
            "topology/kne-lab/r2 applied",
            "topology/kne-lab/r3 applied"
        ]
    );
    for skipped in [
        "skipped Namespace kne-lab (v1)",
        "skipped Pod r1 (v1)",
        "skipped Pod r3 (v1)",
    ] {
        assert!(stderr.contains(skipped), "{stderr}");
    }

    // meshnet's link to the node itself: refused at apply, never left pending.
    let dir = support::TempDir::new("host-link");
    let file = dir.0.join("host.yaml");
    std::fs::write(
        &file,
        "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {name: r9, namespace: kne-lab}\nspec:\n  links:\n    - {uid: 9, peer_pod: localhost, local_intf: eth3, peer_intf: ens4}\n",
    )
    .unwrap();
    let out = apply(&file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("link uid 9: peer_pod \"localhost\" is meshnet's macvlan link"),
        "{stderr}"
    );
    let got = xwirectl_topology(
        &node.socket,
        &["get", "--namespace", "kne-lab", "-o"],
        "json",
    );
    assert!(!String::from_utf8_lossy(&got.stdout).contains("r9"));
}

/// `xwirectl --socket SOCKET topology ARGS LAST`.
fn xwirectl_topology(
    socket: &std::path::Path,
    args: &[&str],
    last: impl AsRef<std::ffi::OsStr>,
) -> std::process::Output {
    std::process::Command::new(support::xwirectl_bin())
        .arg("--socket")
        .arg(socket)
        .arg("topology")
        .args(args)
        .arg(last)
        .output()
        .unwrap()
}

/// CHECK looks at what the switch should carry as it looks at interfaces: an impaired
/// same-node wire on a node without a fast path (no certificates) is a plain veth the
/// impairment never reaches, and CHECK says so; with the impairment gone, it passes.
#[test]
fn check_names_an_impaired_wire_that_the_switch_does_not_carry() {
    let node = start_node("n1", "");
    let plain = pair_topology("r1", "r2", R1_R2);
    let impaired = plain.replacen(
        "local_ip: 10.0.0.1/30,",
        "local_ip: 10.0.0.1/30, impairment: {delay: 20ms},",
        1,
    );
    assert_ne!(impaired, plain);
    node.apply(&impaired);
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    let added = call(&r2, "ADD", &config);
    assert_eq!(added.code, 0, "{}", added.output);
    assert!(ping(&r1.ns, "10.0.0.2", 1).unwrap());

    for pod in [&r1, &r2] {
        let msg = failed_check(pod, &config);
        assert!(msg.contains("not steered through the switch"), "{msg}");
    }

    node.apply(&plain);
    for pod in [&r1, &r2] {
        let checked = call(pod, "CHECK", &config);
        assert_eq!(checked.code, 0, "{}", checked.output);
    }
}
