//! deploy/ on a real node, as deploy/README.md tells an operator to install it: etcd, the
//! API server, controller-manager, scheduler, a kubelet with containerd and runc, and the
//! bridge plugin as the primary CNI (`xwire_testbed::realnode`). The image is `cargo xtask
//! image`'s (from the debug build), imported with `ctr`; the install is `kubectl apply
//! -k deploy/kind/`. Then what an operator checks: chaining into the primary conflist,
//! the plugin installed, the KNE example's wires pinging, Topology status and GWireKObj
//! filled, a pod made again, the daemon killed (SIGKILL, then SIGTERM) without the pods'
//! wires being remade, the lab's namespace deleted, and the DaemonSet deleted: the
//! conflist's original bytes back and the plugin gone. With a second node (its own
//! kubelet and containerd in network and mount namespaces of its own), the example's
//! third pod lands there: two wires cross nodes over QUIC, survive their daemon's
//! SIGKILL, and come back after the node is lost (kubelet and every container killed)
//! and returns.
//!
//! Skipped, with the reason, where a component is missing (in CI: the Kubernetes
//! binaries, which no package registry here ships).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use xwire_testbed::realnode::{self, RealNode, SecondNode, CNI_BIN_DIR, CONFLIST, NODE2_NAME};

/// One real node at a time: each owns the host's CNI directories.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const LAB: &str = "kne-lab";
/// Each wire of deploy/kind/kne-lab.yaml: its uid, its two ends, and the /30 the test
/// puts on them (the example's links carry no addresses).
/// A wire's end: its pod and interface.
type End = (&'static str, &'static str);
const WIRES: [(u32, End, End, &str); 3] = [
    (0, ("r1", "eth1"), ("r2", "eth1"), "10.233.0"),
    (1, ("r2", "eth2"), ("r3", "eth2"), "10.233.1"),
    (2, ("r1", "eth2"), ("r3", "eth1"), "10.233.2"),
];

fn workspace() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("..")).unwrap()
}

/// A binary of the workspace's debug build (which `cargo xtask image --debug` builds).
fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join(name)
}

fn elapsed(start: Instant) -> String {
    format!("{:6.1} s", start.elapsed().as_secs_f64())
}

struct Operator<'a> {
    node: &'a RealNode,
    start: Instant,
}

impl Operator<'_> {
    fn step(&self, what: &str) {
        eprintln!("[{}] {what}", elapsed(self.start));
    }

    /// `result`'s value, or a failure that carries what the daemon and the kubelet said.
    fn must<T>(&self, what: &str, result: Result<T, String>) -> T {
        result.unwrap_or_else(|e| {
            let daemon = self
                .node
                .kubectl(&[
                    "-n",
                    "xwire-system",
                    "logs",
                    "-l",
                    "app=xwired",
                    "--prefix",
                    "--tail",
                    "30",
                ])
                .unwrap_or_else(|e| e);
            let pods = self
                .node
                .kubectl(&["get", "pods", "-A", "-o", "wide"])
                .unwrap_or_else(|e| e);
            panic!(
                "{what}: {e}\n--- pods\n{pods}\n--- xwired\n{daemon}\n--- kubelet\n{}",
                self.node.log("kubelet")
            )
        })
    }

    fn kubectl(&self, args: &[&str]) -> String {
        self.must(&args.join(" "), self.node.kubectl(args))
    }

    fn eventually<T>(&self, what: &str, secs: u64, check: impl FnMut() -> Result<T, String>) -> T {
        self.must(
            what,
            self.node.eventually(what, Duration::from_secs(secs), check),
        )
    }

    /// The daemon's pod on `node`.
    fn daemon_pod(&self, node: &str) -> Result<String, String> {
        let selector = format!("spec.nodeName={node}");
        let name = self.node.kubectl(&[
            "-n",
            "xwire-system",
            "get",
            "pods",
            "-l",
            "app=xwired",
            "--field-selector",
            &selector,
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])?;
        Ok(name.trim().to_string())
    }

    /// `xwirectl` against the daemon's socket, inside the daemon's container on `node`.
    fn daemon(&self, node: &str, args: &[&str]) -> Result<String, String> {
        let pod = self.daemon_pod(node)?;
        let mut full = vec![
            "-n",
            "xwire-system",
            "exec",
            &pod,
            "--",
            "/usr/local/bin/xwirectl",
            "--socket",
            "/run/xwire/xwired.sock",
        ];
        full.extend_from_slice(args);
        self.node.kubectl(&full)
    }
}

/// The process running `pod`'s container (`sleep infinity`), by the hostname the
/// kubelet gives it.
fn pod_pid(pod: &str) -> Result<u32, String> {
    let wanted = format!("HOSTNAME={pod}");
    realnode::processes_named("sleep")
        .into_iter()
        .find(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes())
        })
        .ok_or(format!("no process of pod {pod}"))
}

/// Runs `args` in `pod`'s network namespace, from the host: the example's pods have no
/// NET_ADMIN of their own to put an address on a link.
fn in_pod(pod: &str, args: &[&str]) -> Result<String, String> {
    let pid = pod_pid(pod)?;
    let out = Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n"])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{pod}: {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `pod`'s interface index of `ifname`: a wire remade would have a new one.
fn ifindex(pod: &str, ifname: &str) -> Result<String, String> {
    let line = in_pod(pod, &["ip", "-o", "link", "show", ifname])?;
    Ok(line
        .split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string())
}

fn address_wires(op: &Operator) {
    for (_, (a, a_if), (b, b_if), net) in WIRES {
        op.must(
            "an address",
            in_pod(
                a,
                &["ip", "addr", "replace", &format!("{net}.1/30"), "dev", a_if],
            ),
        );
        op.must(
            "an address",
            in_pod(
                b,
                &["ip", "addr", "replace", &format!("{net}.2/30"), "dev", b_if],
            ),
        );
    }
}

/// Every wire carries a ping, each way, sent by `kubectl exec` as an operator would.
fn ping_every_wire(op: &Operator, when: &str) {
    for (uid, (a, _), (b, _), net) in WIRES {
        for (from, to) in [(a, format!("{net}.2")), (b, format!("{net}.1"))] {
            op.eventually(
                &format!("{when}: wire {uid}, {from} pings {to}"),
                30,
                || {
                    op.node.kubectl(&[
                        "-n", LAB, "exec", from, "--", "ping", "-c", "2", "-W", "2", &to,
                    ])
                },
            );
        }
    }
}

fn pods_ready(op: &Operator, pods: &str) {
    op.eventually(&format!("{pods} Ready"), 120, || {
        op.node.kubectl(&[
            "-n",
            LAB,
            "wait",
            "--for=condition=Ready",
            "pod",
            pods,
            "--timeout=10s",
        ])
    });
}

/// The daemon's host process on `node`, found by name among the kubelets' containers
/// (the second node's are under its own cgroup root).
fn xwired_pid(node: &str) -> Result<u32, String> {
    let on_second = node == NODE2_NAME;
    realnode::processes_named("xwired")
        .into_iter()
        .find(|pid| {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            cgroup.contains("kubepods") && cgroup.contains("/xwt-node2/") == on_second
        })
        .ok_or(format!("no xwired in a pod on {node}"))
}

fn daemon_restarts(op: &Operator, node: &str) -> u32 {
    let pod = op.must("the daemon's pod", op.daemon_pod(node));
    op.kubectl(&[
        "-n",
        "xwire-system",
        "get",
        "pod",
        &pod,
        "-o",
        "jsonpath={.status.containerStatuses[0].restartCount}",
    ])
    .trim()
    .parse()
    .unwrap_or(0)
}

/// The daemon on `node` is killed with `signal`; the kubelet starts it again; the pods
/// keep their interfaces (same indexes) and their wires carry pings again.
fn daemon_killed(op: &Operator, node: &str, signal: &str) {
    op.step(&format!("the daemon on {node} killed with {signal}"));
    let before: Vec<String> = WIRES
        .iter()
        .map(|(_, (a, a_if), _, _)| op.must("ifindex", ifindex(a, a_if)))
        .collect();
    let restarts = daemon_restarts(op, node);
    let pid = op.must("the daemon's process", xwired_pid(node));
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    op.eventually("the kubelet starts the daemon again", 120, || {
        let now = daemon_restarts(op, node);
        (now > restarts)
            .then_some(())
            .ok_or(format!("restarts {now}"))
    });
    op.eventually("the daemon answers again", 120, || {
        op.daemon(node, &["wires"])
    });
    let after: Vec<String> = WIRES
        .iter()
        .map(|(_, (a, a_if), _, _)| op.must("ifindex", ifindex(a, a_if)))
        .collect();
    assert_eq!(
        before, after,
        "the pods' wire ends were made again after {signal}"
    );
    ping_every_wire(op, &format!("after {signal}"));
}

fn chained(conflist: &[u8]) -> Result<(), String> {
    let value: serde_json::Value = serde_json::from_slice(conflist).map_err(|e| e.to_string())?;
    let types: Vec<&str> = value["plugins"]
        .as_array()
        .ok_or("no plugins")?
        .iter()
        .filter_map(|p| p["type"].as_str())
        .collect();
    (types == ["bridge", "portmap", "xwire"])
        .then_some(())
        .ok_or(format!("plugins {types:?}"))
}

/// A real node (the others wait for it to go), the image built and imported into it, and
/// when it all began; `None` where a component is missing (the test reported skipped).
fn node_with_image() -> Option<(
    std::sync::MutexGuard<'static, ()>,
    RealNode,
    PathBuf,
    Instant,
)> {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let start = Instant::now();
    let node = realnode::start_or_skip()?;
    eprintln!(
        "[{}] node Ready; the image, as `cargo xtask image` makes it",
        elapsed(start)
    );
    let archive = build_image(&node);
    node.load_image(&archive, "localhost/xwire")
        .unwrap_or_else(|e| panic!("importing the image: {e}"));
    Some((one, node, archive, start))
}

/// `cargo xtask image --debug`, into the node's directory.
fn build_image(node: &RealNode) -> PathBuf {
    let archive = node.dir.0.join("xwire-image.tar");
    succeeds(
        Command::new(env!("CARGO"))
            .current_dir(workspace())
            .args(["xtask", "image", "--debug"])
            .arg(&archive),
    );
    archive
}

/// `cmd`'s standard output; it must succeed.
fn succeeds(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The install, as deploy/README.md says, and its daemons ready on `nodes` nodes.
fn install(op: &Operator) {
    op.step("the install, as deploy/README.md says");
    op.kubectl(&["create", "namespace", "xwire-system"]);
    let ca = succeeds(Command::new(built("xwirectl")).arg("ca-secret"));
    op.must(
        "the CA",
        op.node.kubectl_with_input(&["apply", "-f", "-"], Some(&ca)),
    );
    op.kubectl(&["apply", "-k", &kind().to_string_lossy()]);
    op.kubectl(&[
        "-n",
        "xwire-system",
        "rollout",
        "status",
        "deploy/xwire-signer",
        "--timeout=180s",
    ]);
    op.kubectl(&[
        "-n",
        "xwire-system",
        "rollout",
        "status",
        "ds/xwired",
        "--timeout=180s",
    ]);
}

fn kind() -> PathBuf {
    workspace().join("deploy/kind")
}

fn example() -> String {
    workspace()
        .join("deploy/kind/kne-lab.yaml")
        .to_string_lossy()
        .into_owned()
}

/// The node each of the example's pods runs on.
fn pod_node(op: &Operator, pod: &str) -> String {
    op.kubectl(&[
        "-n",
        LAB,
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.spec.nodeName}",
    ])
    .trim()
    .to_string()
}

/// The DaemonSet deleted: each conflist gets its bytes back, the plugin goes.
fn uninstall(op: &Operator, conflists: &[(PathBuf, Vec<u8>)], plugins: &[PathBuf]) {
    op.step("the DaemonSet deleted");
    op.kubectl(&[
        "delete",
        "-k",
        &kind().to_string_lossy(),
        "--wait=true",
        "--timeout=180s",
    ]);
    for (path, original) in conflists {
        op.eventually(&format!("{}'s original bytes", path.display()), 60, || {
            let now = std::fs::read(path).map_err(|e| e.to_string())?;
            (&now == original)
                .then_some(())
                .ok_or(String::from_utf8_lossy(&now).into_owned())
        });
    }
    for plugin in plugins {
        op.eventually(&format!("{} removed", plugin.display()), 60, || {
            (!plugin.exists())
                .then_some(())
                .ok_or("still there".to_string())
        });
    }
}

#[test]
fn the_daemonset_wires_the_kne_example_on_a_real_node_and_takes_itself_out_again() {
    let Some((_one, node, _, start)) = node_with_image() else {
        return;
    };
    let op = Operator { node: &node, start };
    let original = std::fs::read(CONFLIST).unwrap();
    install(&op);

    op.step("chained after the primary plugin, the plugin installed");
    op.eventually("xwire chained into the primary conflist", 30, || {
        chained(&std::fs::read(CONFLIST).map_err(|e| e.to_string())?)
    });
    assert!(Path::new(CNI_BIN_DIR).join("xwire").is_file());

    op.step("the KNE example");
    op.kubectl(&["apply", "-f", &example()]);
    pods_ready(&op, "--all");
    for (_, (a, a_if), (b, b_if), _) in WIRES {
        op.kubectl(&["-n", LAB, "exec", a, "--", "ip", "link", "show", a_if]);
        op.kubectl(&["-n", LAB, "exec", b, "--", "ip", "link", "show", b_if]);
    }
    address_wires(&op);
    ping_every_wire(&op, "first");

    op.step("Topology status and the node's GWireKObj");
    for pod in ["r1", "r2", "r3"] {
        let status = op.eventually(&format!("{pod}'s Topology status"), 30, || {
            let ip = op.node.kubectl(&[
                "-n",
                LAB,
                "get",
                "topology",
                pod,
                "-o",
                "jsonpath={.status.src_ip}",
            ])?;
            (ip.trim() == realnode::NODE_IP)
                .then_some(ip)
                .ok_or("no src_ip yet".to_string())
        });
        assert_eq!(status.trim(), realnode::NODE_IP);
    }
    let wide = op.kubectl(&["-n", LAB, "get", "topology", "-o", "wide"]);
    assert!(
        wide.contains("NODE IP") && wide.contains(realnode::NODE_IP),
        "{wide}"
    );
    op.eventually("the node's GWireKObj record holds every end", 30, || {
        let ends = op.node.kubectl(&[
            "-n",
            LAB,
            "get",
            "gwirekobjs",
            "-o",
            "jsonpath={.items[*].status.xwireSummary.ends}",
        ])?;
        (ends.trim() == "6")
            .then_some(())
            .ok_or(format!("ends {ends:?}"))
    });

    op.step("a pod deleted and made again");
    op.kubectl(&[
        "-n",
        LAB,
        "delete",
        "pod",
        "r2",
        "--wait=true",
        "--timeout=120s",
    ]);
    op.kubectl(&["apply", "-f", &example()]);
    pods_ready(&op, "r2");
    address_wires(&op);
    ping_every_wire(&op, "after r2 was made again");

    daemon_killed(&op, realnode::NODE_NAME, "KILL");
    daemon_killed(&op, realnode::NODE_NAME, "TERM");

    op.step("the lab's namespace deleted");
    op.kubectl(&["delete", "namespace", LAB, "--wait=true", "--timeout=180s"]);
    op.eventually("the daemon holds no wire and no attachment", 60, || {
        let text = op.daemon(realnode::NODE_NAME, &["wires", "--json"])?;
        let state: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        let held = |key: &str| state[key].as_array().map_or(usize::MAX, Vec::len);
        (held("wires") == 0 && held("attachments") == 0)
            .then_some(())
            .ok_or(format!(
                "{} wires, {} attachments",
                held("wires"),
                held("attachments")
            ))
    });

    uninstall(
        &op,
        &[(PathBuf::from(CONFLIST), original)],
        &[Path::new(CNI_BIN_DIR).join("xwire")],
    );
    op.step("done");
}

#[test]
fn the_kne_examples_third_pod_on_a_second_node_is_wired_over_quic_and_survives_losing_it() {
    let Some((_one, node, archive, start)) = node_with_image() else {
        return;
    };
    let op = Operator { node: &node, start };
    op.step("node 2");
    let second = op.must(
        "node 2",
        SecondNode::start(&node, &[(&archive, "localhost/xwire")]),
    );
    let second_conflist = second.conflist();
    let originals = [
        (PathBuf::from(CONFLIST), std::fs::read(CONFLIST).unwrap()),
        (
            second_conflist.clone(),
            std::fs::read(&second_conflist).unwrap(),
        ),
    ];
    install(&op);
    op.eventually("a daemon on each node", 120, || {
        for name in [realnode::NODE_NAME, NODE2_NAME] {
            op.daemon(name, &["wires"])?;
        }
        Ok(())
    });
    op.eventually("xwire chained on node 2", 30, || {
        chained(&std::fs::read(&second_conflist).map_err(|e| e.to_string())?)
    });

    op.step("the KNE example across two nodes");
    op.kubectl(&["apply", "-f", &example()]);
    pods_ready(&op, "--all");
    let (r1, r2, r3) = (
        pod_node(&op, "r1"),
        pod_node(&op, "r2"),
        pod_node(&op, "r3"),
    );
    assert_eq!(r1, r2, "r1 and r2 share a node (kne-lab.yaml's affinity)");
    assert_ne!(
        r1, r3,
        "r3 is on the other node (kne-lab.yaml's anti-affinity)"
    );
    op.step(&format!("r1 and r2 on {r1}, r3 on {r3}"));
    address_wires(&op);
    ping_every_wire(&op, "across nodes");
    op.eventually("each node's record names the other as a peer", 30, || {
        let peers = op.node.kubectl(&[
            "-n",
            LAB,
            "get",
            "gwirekobjs",
            "-o",
            "jsonpath={.items[*].status.xwireSummary.peers}",
        ])?;
        (peers.contains(realnode::NODE_NAME) && peers.contains(NODE2_NAME))
            .then_some(())
            .ok_or(format!("peers {peers:?}"))
    });

    daemon_killed(&op, NODE2_NAME, "KILL");

    op.step("node 2 lost: its kubelet and every container on it killed");
    let lost: Vec<&str> = ["r1", "r2", "r3"]
        .into_iter()
        .filter(|pod| pod_node(&op, pod) == NODE2_NAME)
        .collect();
    // A wire that crosses, pinged from its end that stays up.
    let (from, to) = WIRES
        .iter()
        .find_map(
            |(_, (a, _), (b, _), net)| match (lost.contains(a), lost.contains(b)) {
                (false, true) => Some((*a, format!("{net}.2"))),
                (true, false) => Some((*b, format!("{net}.1"))),
                _ => None,
            },
        )
        .expect("a wire crosses nodes");
    op.step(&format!("{lost:?} lost with node 2"));
    let mut second = second;
    second.lose();
    op.eventually(&format!("{from}'s wire to node 2 cut"), 30, || {
        match op.node.kubectl(&[
            "-n", LAB, "exec", from, "--", "ping", "-c", "1", "-W", "1", &to,
        ]) {
            Ok(_) => Err(format!("{from} still reaches {to}")),
            Err(_) => Ok(()),
        }
    });
    op.step("node 2 back");
    op.must("node 2's kubelet", second.start_kubelet());
    for pod in &lost {
        op.eventually(
            &format!("{pod} running again with its wire ends"),
            180,
            || {
                for (_, (a, a_if), (b, b_if), _) in WIRES {
                    for (end, ifname) in [(a, a_if), (b, b_if)] {
                        if end == *pod {
                            in_pod(pod, &["ip", "link", "show", ifname])?;
                        }
                    }
                }
                Ok(())
            },
        );
        pods_ready(&op, pod);
    }
    address_wires(&op);
    ping_every_wire(&op, "after node 2 came back");

    op.kubectl(&["delete", "namespace", LAB, "--wait=true", "--timeout=180s"]);
    uninstall(
        &op,
        &originals,
        &[Path::new(CNI_BIN_DIR).join("xwire"), second.plugin()],
    );
    op.step("done");
}
