//! A KNE-sized ring through a real API server: `pods` pods in a ring (KNE's example
//! scale is 150), alternating between two nodes so that every link crosses nodes, one
//! Topology per pod as KNE writes them (uids from 0, eth0 never linked). Measured: from
//! the first ADD until every wire forwards (a ping across each link), and the API
//! requests the daemons made per pod. The baseline, in the same run, is the same ring on
//! two nodes with the embedded store, its objects given with `xwirectl topology apply`'s
//! request: the ratio is what keeping state in the API server costs.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::cni_scale::{Binaries, WithNamespace};
use crate::testbed::apiserver::{self, ApiServer, Nodes};
use crate::testbed::checks::ping;
use crate::testbed::cluster::{node_pair, Node, Pod, TempDir, TEST_FRAMES_PER_PORT};

const NAMESPACE: &str = "kne-ring";

#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// From the first ADD until a ping crossed every link.
    pub bring_up_s: f64,
    /// Of that, the ADD calls, one after another.
    pub adds_s: f64,
    /// Requests the two daemons' stores made to the API server during bring-up, per pod
    /// (zero for the embedded store).
    pub api_requests_per_pod: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pods: usize,
    pub links: usize,
    pub kubernetes: Run,
    pub embedded: Run,
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

/// ADD of every pod (alternating nodes), then pings until every link has forwarded one.
fn bring_up(binaries: &Binaries, nodes: [&Node; 2], pods: &[Pod]) -> Result<Run> {
    let requests = || -> u64 { nodes.iter().map(|n| n.state().store_requests).sum() };
    let before = requests();
    let started = Instant::now();
    for (i, pod) in pods.iter().enumerate() {
        let node = nodes[i % 2];
        let config = node.net_config("1.1.0").with_namespace(NAMESPACE);
        let out = pod.call(&binaries.plugin, "ADD", &config);
        if out.code != 0 {
            bail!("ADD {}: {}\n{}", pod.name, out.output, node.log());
        }
    }
    let adds = started.elapsed();
    let mut waiting: Vec<usize> = (0..pods.len()).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !waiting.is_empty() {
        ensure!(
            Instant::now() < deadline,
            "{} links had not forwarded after 120 s; {}:\n{}\n{}:\n{}",
            waiting.len(),
            nodes[0].name,
            nodes[0].log(),
            nodes[1].name,
            nodes[1].log()
        );
        waiting.retain(|&i| {
            let (_, theirs) = addresses(i);
            let peer = theirs.split('/').next().unwrap_or_default().to_owned();
            !ping(&pods[i].ns, &peer, 1).unwrap_or(false)
        });
    }
    let bring_up = started.elapsed();
    Ok(Run {
        bring_up_s: bring_up.as_secs_f64(),
        adds_s: adds.as_secs_f64(),
        api_requests_per_pod: (requests() - before) as f64 / pods.len() as f64,
    })
}

fn tear_down(binaries: &Binaries, nodes: [&Node; 2], pods: &[Pod]) {
    for (i, pod) in pods.iter().enumerate() {
        let config = nodes[i % 2].net_config("1.1.0").with_namespace(NAMESPACE);
        let _ = pod.call(&binaries.plugin, "DEL", &config);
    }
}

pub fn run(binaries: &Binaries, xwirectl: &PathBuf, pods: usize) -> Result<Report> {
    ensure!(
        pods >= 4 && pods % 2 == 0,
        "--pods must be even and at least 4"
    );
    let server = ApiServer::start().map_err(|reason| anyhow::anyhow!(reason))?;
    let secret = std::process::Command::new(xwirectl)
        .arg("ca-secret")
        .output()?;
    ensure!(secret.status.success(), "xwirectl ca-secret failed");
    let nodes = Nodes {
        names: ["ks1", "ks2"],
        subnet: 9,
    };
    apiserver::install(&server, nodes, &String::from_utf8(secret.stdout)?);
    let mut objects = vec![json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": {"xwire.dev/wire": "enabled"}}})];
    objects.extend(ring(pods));
    apiserver::apply_objects(&server, &objects);
    let extra = format!(
        "max_ports = {}\nframes_per_port = {TEST_FRAMES_PER_PORT}",
        pods + 8
    );
    let (k1, k2) = apiserver::kube_nodes(&server, &binaries.xwired, nodes, &extra);
    let pod_list: Vec<Pod> = (0..pods).map(|i| Pod::new(&name(i, pods))).collect();
    let kubernetes = bring_up(binaries, [&k1, &k2], &pod_list)?;
    tear_down(binaries, [&k1, &k2], &pod_list);
    drop((k1, k2));
    drop(pod_list);

    let certs = TempDir::new("ring-certs");
    let (e1, e2) = node_pair(
        &binaries.xwired,
        &certs,
        ["es1", "es2"],
        "192.168.79",
        (pods + 8, TEST_FRAMES_PER_PORT),
        "",
    )?;
    for node in [&e1, &e2] {
        node.apply_objects(ring(pods));
    }
    let pod_list: Vec<Pod> = (0..pods).map(|i| Pod::new(&name(i, pods))).collect();
    let embedded = bring_up(binaries, [&e1, &e2], &pod_list)?;
    tear_down(binaries, [&e1, &e2], &pod_list);
    Ok(Report {
        pods,
        links: pods,
        kubernetes,
        embedded,
    })
}

pub fn print(report: &Report) {
    println!(
        "{} pods in a ring on 2 nodes, {} links, every one across nodes; ADD one pod after another, then a ping across each link",
        report.pods, report.links
    );
    println!(
        "{:<24} {:>12} {:>12} {:>18}",
        "store", "bring-up s", "of it ADDs", "API requests/pod"
    );
    for (store, run) in [
        ("kubernetes (API server)", &report.kubernetes),
        ("embedded (redb)", &report.embedded),
    ] {
        println!(
            "{store:<24} {:>12.2} {:>12.2} {:>18.1}",
            run.bring_up_s, run.adds_s, run.api_requests_per_pod
        );
    }
    println!(
        "bring-up ratio, kubernetes to embedded: {:.2}x",
        report.kubernetes.bring_up_s / report.embedded.bring_up_s
    );
}
