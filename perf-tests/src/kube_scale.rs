//! A KNE-sized ring through a real API server: `pods` pods in a ring (KNE's example
//! scale is 150), on one node (every link a veth wire) or alternating between two (every
//! link crosses nodes), one Topology per pod as KNE writes them (uids from 0, eth0 never
//! linked). Measured: from the first ADD until every wire forwards (a ping across each
//! link), and the API requests per pod, as the daemons count their own and as the API
//! server counts all it served (`apiserver_request_total`). The baseline, in the same
//! run, is the same ring on the same nodes with the embedded store, its objects given
//! with `xwirectl topology apply`'s request: the ratio is what keeping state in the API
//! server costs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::cni_scale::{timed_calls, Binaries, WithNamespace};
use crate::testbed::apiserver::{self, ApiServer, Nodes};
use crate::testbed::checks::ping;
use crate::testbed::cluster::{node_pair, Node, Pod, TempDir, TEST_FRAMES_PER_PORT};

const NAMESPACE: &str = "kne-ring";
/// The embedded nodes' underlay /24: node i is at .(i+1).
const EMBEDDED_SUBNET: &str = "192.168.79";

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// From the first ADD until a ping crossed every link.
    pub bring_up_s: f64,
    /// Of that, the ADD calls, one after another.
    pub adds_s: f64,
    /// Links whose first ping (sent once every ADD was answered, one link after another,
    /// each waiting up to 2 s) got no reply: the wires not yet forwarding then.
    pub first_pings_failed: usize,
    /// From the first ADD until the daemons' stores had written every record to their
    /// server (the Kubernetes store writes behind its journal); the bring-up for the
    /// embedded store.
    pub written_s: f64,
    /// Requests the daemons' stores made to the API server during bring-up, per pod
    /// (zero for the embedded store).
    pub api_requests_per_pod: f64,
    /// Requests the API server served during bring-up, per pod, by its own count; none
    /// for the embedded store.
    pub server_requests_per_pod: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pods: usize,
    pub nodes: usize,
    pub callers: usize,
    pub links: usize,
    pub kubernetes: Run,
    pub embedded: Run,
    /// The API server's requests during the Kubernetes bring-up, per pod, by verb and
    /// resource, most first.
    pub server_requests_by_kind: Vec<(String, f64)>,
}

/// Link i joins pod i (eth1) and pod i+1 (eth2), with 10.(100+i/250).(i%250).1/30
/// and .2.
fn addresses(i: usize) -> (String, String) {
    let base = format!("10.{}.{}", 100 + i / 250, i % 250);
    (format!("{base}.1/30"), format!("{base}.2/30"))
}

fn name(i: usize, pods: usize) -> String {
    format!("r{}", i % pods)
}

fn ring(pods: usize) -> Vec<Value> {
    (0..pods)
        .map(|i| {
            let back = (i + pods - 1) % pods;
            let (mine, theirs) = addresses(i);
            let (their_back, mine_back) = addresses(back);
            json!({
                "apiVersion": "networkop.co.uk/v1beta1",
                "kind": "Topology",
                "metadata": {"name": name(i, pods), "namespace": NAMESPACE},
                "spec": {"links": [
                    {"uid": i, "peer_pod": name(i + 1, pods), "local_intf": "eth1", "peer_intf": "eth2",
                     "local_ip": mine, "peer_ip": theirs},
                    {"uid": back, "peer_pod": name(back, pods), "local_intf": "eth2", "peer_intf": "eth1",
                     "local_ip": mine_back, "peer_ip": their_back},
                ]},
            })
        })
        .collect()
}

/// ADD of every pod (alternating nodes) from `callers` callers at once, then pings until
/// every link has forwarded one. `served`: the API server's own count of requests, where
/// there is one.
fn bring_up(
    binaries: &Binaries,
    nodes: &[&Node],
    pods: &[Pod],
    callers: usize,
    served: Option<&dyn Fn() -> Result<u64>>,
) -> Result<Run> {
    let requests = || -> u64 { nodes.iter().map(|n| n.state().store_requests).sum() };
    let before = requests();
    let served_before = served.map(|count| count()).transpose()?;
    let started = Instant::now();
    timed_calls(pods, callers, |i, pod| {
        let node = nodes[i % nodes.len()];
        let config = node.net_config("1.1.0").with_namespace(NAMESPACE);
        let out = pod.call(&binaries.plugin, "ADD", &config);
        if out.code != 0 {
            bail!("ADD {}: {}\n{}", pod.name, out.output, node.log());
        }
        Ok(())
    })?;
    let adds = started.elapsed();
    let mut waiting: Vec<usize> = (0..pods.len()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut first_pings_failed = None;
    while !waiting.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "{} links had not forwarded after 120 s; {}",
            waiting.len(),
            nodes
                .iter()
                .map(|n| format!("{}:\n{}", n.name, n.log()))
                .collect::<Vec<_>>()
                .join("\n")
        );
        waiting.retain(|&i| {
            let (_, theirs) = addresses(i);
            let peer = theirs.split('/').next().unwrap_or_default().to_owned();
            !ping(&pods[i].ns, &peer, 1).unwrap_or(false)
        });
        first_pings_failed.get_or_insert(waiting.len());
    }
    let bring_up = started.elapsed();
    // The requests counted are those of the whole bring-up, the records' last writes
    // included.
    let deadline = Instant::now() + Duration::from_secs(120);
    while nodes.iter().any(|n| n.state().store_unwritten > 0) {
        ensure!(
            Instant::now() < deadline,
            "the stores had not written their records 120 s after the pings"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let written = started.elapsed();
    let server_requests = match (served, served_before) {
        (Some(count), Some(before)) => Some(count()?.saturating_sub(before)),
        _ => None,
    };
    Ok(Run {
        bring_up_s: bring_up.as_secs_f64(),
        adds_s: adds.as_secs_f64(),
        first_pings_failed: first_pings_failed.unwrap_or(0),
        written_s: written.as_secs_f64(),
        api_requests_per_pod: (requests() - before) as f64 / pods.len() as f64,
        server_requests_per_pod: server_requests.map(|n| n as f64 / pods.len() as f64),
    })
}

fn tear_down(binaries: &Binaries, nodes: &[&Node], pods: &[Pod]) {
    for (i, pod) in pods.iter().enumerate() {
        let config = nodes[i % nodes.len()]
            .net_config("1.1.0")
            .with_namespace(NAMESPACE);
        let _ = pod.call(&binaries.plugin, "DEL", &config);
    }
}

pub fn run(
    binaries: &Binaries,
    xwirectl: &PathBuf,
    pods: usize,
    nodes: usize,
    callers: usize,
) -> Result<Report> {
    ensure!(
        pods >= 4 && pods % 2 == 0,
        "--pods must be even and at least 4"
    );
    ensure!((1..=2).contains(&nodes), "--nodes must be 1 or 2");
    ensure!(callers >= 1, "--callers must be at least 1");
    let signer = binaries.xwired.with_file_name("xwire-signer");
    ensure!(
        signer.is_file(),
        "{} not found: build it beside xwired (cargo build --release -p xwire-control)",
        signer.display()
    );
    let server = ApiServer::start().map_err(|reason| anyhow::anyhow!(reason))?;
    let secret = std::process::Command::new(xwirectl)
        .arg("ca-secret")
        .output()?;
    ensure!(secret.status.success(), "xwirectl ca-secret failed");
    let names = Nodes {
        names: ["ks1", "ks2"],
        subnet: 9,
    };
    apiserver::install(&server, names, &String::from_utf8(secret.stdout)?);
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"xwire.dev/wire": "enabled"}}})];
    objects.extend(ring(pods));
    apiserver::apply_objects(&server, &objects);
    let extra = format!(
        "max_ports = {}\nframes_per_port = {TEST_FRAMES_PER_PORT}",
        pods + 8
    );
    let (k1, k2) = apiserver::kube_nodes(&server, &binaries.xwired, names, &extra);
    // Each pod's Pod object, bound to its node as the scheduler binds it before the
    // kubelet's ADD: a node takes a claim on a wire only from the node that runs the far
    // end's pod.
    for i in 0..pods {
        apiserver::bind_pod(&server, NAMESPACE, &name(i, pods), names.names[i % nodes]);
    }
    let pod_list: Vec<Pod> = (0..pods).map(|i| Pod::new(&name(i, pods))).collect();
    let served = || server.requests_served().map_err(anyhow::Error::msg);
    let by_kind_before = server.requests_by_kind().map_err(anyhow::Error::msg)?;
    let kubernetes = bring_up(
        binaries,
        &[&k1, &k2][..nodes],
        &pod_list,
        callers,
        Some(&served),
    )?;
    let by_kind = server.requests_by_kind().map_err(anyhow::Error::msg)?;
    let mut server_requests_by_kind: Vec<(String, f64)> = by_kind
        .into_iter()
        .map(|(kind, n)| {
            let before = by_kind_before.get(&kind).copied().unwrap_or(0);
            (kind, n.saturating_sub(before) as f64 / pods as f64)
        })
        .filter(|(_, per_pod)| *per_pod > 0.0)
        .collect();
    server_requests_by_kind.sort_by(|a, b| b.1.total_cmp(&a.1));
    tear_down(binaries, &[&k1, &k2][..nodes], &pod_list);
    drop((k1, k2));
    drop(pod_list);
    // The baseline runs without the API server and etcd beside it, taking no CPU.
    drop(server);

    let certs = TempDir::new("ring-certs");
    let (e1, e2) = node_pair(
        &binaries.xwired,
        &certs,
        ["es1", "es2"],
        EMBEDDED_SUBNET,
        (pods + 8, TEST_FRAMES_PER_PORT),
        "",
    )?;
    // Where each pod runs, as a lab file says it (the Topology status's `src_ip`): a
    // node takes a claim on a wire only from the node that runs the far end's pod.
    let mut placed = ring(pods);
    for (i, object) in placed.iter_mut().enumerate() {
        object["status"] = json!({"src_ip": format!("{EMBEDDED_SUBNET}.{}", i % nodes + 1)});
    }
    for node in [&e1, &e2] {
        node.apply_objects(placed.clone());
    }
    let pod_list: Vec<Pod> = (0..pods).map(|i| Pod::new(&name(i, pods))).collect();
    let embedded = bring_up(binaries, &[&e1, &e2][..nodes], &pod_list, callers, None)?;
    tear_down(binaries, &[&e1, &e2][..nodes], &pod_list);
    Ok(Report {
        pods,
        nodes,
        callers,
        links: pods,
        kubernetes,
        embedded,
        server_requests_by_kind,
    })
}

pub fn print(report: &Report) {
    let shape = match report.nodes {
        1 => "on 1 node, every one a veth wire",
        _ => "on 2 nodes, every one across nodes",
    };
    let adds = match report.callers {
        1 => "ADD one pod after another".to_owned(),
        n => format!("ADDs from {n} callers at once"),
    };
    println!(
        "{} pods in a ring, {} links {shape}; {adds}, then a ping across each link",
        report.pods, report.links
    );
    println!(
        "{:<24} {:>12} {:>12} {:>14} {:>12} {:>22} {:>22}",
        "store",
        "bring-up s",
        "of it ADDs",
        "first pings lost",
        "written s",
        "daemons' requests/pod",
        "server's requests/pod"
    );
    for (store, run) in [
        ("kubernetes (API server)", &report.kubernetes),
        ("embedded (redb)", &report.embedded),
    ] {
        let served = run
            .server_requests_per_pod
            .map_or("-".to_owned(), |n| format!("{n:.2}"));
        println!(
            "{store:<24} {:>12.2} {:>12.2} {:>14} {:>12.2} {:>22.2} {served:>22}",
            run.bring_up_s,
            run.adds_s,
            run.first_pings_failed,
            run.written_s,
            run.api_requests_per_pod
        );
    }
    println!(
        "bring-up ratio, kubernetes to embedded: {:.2}x",
        report.kubernetes.bring_up_s / report.embedded.bring_up_s
    );
    let kinds: Vec<String> = (report.server_requests_by_kind.iter())
        .map(|(kind, per_pod)| format!("{kind} {per_pod:.2}"))
        .collect();
    println!(
        "the API server's requests per pod, by kind: {}",
        kinds.join(", ")
    );
}
