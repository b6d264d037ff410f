//! Per-node certificates without the CA key on any node, against a real kube-apiserver
//! (skipped, with the reason, where there is none): each daemon posts a
//! CertificateSigningRequest with the token of a pod on its node, and `xwire-signer`,
//! running with deploy/base/signer.yaml's RBAC, signs it only for that node. Two node
//! identities of the one ServiceAccount, as two daemons of the DaemonSet have.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use support::apiserver::{self, ApiServer, Nodes};
use xwire_pki::NodeRequest;
use xwire_proto::local::{Request, Response};

const NODES: Nodes = Nodes {
    names: ["kc1", "kc2"],
    subnet: 15,
};

fn signer_bin() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_BIN_EXE_xwire-signer"))
}

/// Posts a request for `name` as `client`; returns the object's name and the request
/// (with its key).
fn post(
    server: &ApiServer,
    client: &kube::Client,
    name: &str,
    signer: &str,
) -> (String, NodeRequest) {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let request = NodeRequest::new(name).unwrap();
    let object = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("test-{name}-")),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.csr_pem.clone().into_bytes()),
            signer_name: signer.into(),
            usages: Some(vec!["digital signature".into(), "server auth".into()]),
            ..Default::default()
        },
        status: None,
    };
    let made = (server.runtime)
        .block_on(api.create(&PostParams::default(), &object))
        .unwrap();
    (made.metadata.name.unwrap(), request)
}

/// The request once answered: its certificate, or the Denied condition's message.
fn answer(server: &ApiServer, name: &str) -> Result<String, String> {
    let api: Api<CertificateSigningRequest> = Api::all(server.client.clone());
    let start = Instant::now();
    loop {
        let csr = server.runtime.block_on(api.get(name)).unwrap();
        let status = csr.status.unwrap_or_default();
        if let Some(cert) = status.certificate.filter(|c| !c.0.is_empty()) {
            return Ok(String::from_utf8(cert.0).unwrap());
        }
        if let Some(denied) = status
            .conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Denied" || c.type_ == "Failed")
        {
            return Err(denied.message.unwrap_or_default());
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "request {name} not answered; the signer's log:\n{}",
            server.signer_log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn each_node_gets_a_certificate_for_its_own_name_only() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    server.start_signer(&signer_bin());
    let [kc1, kc2] = NODES.names.map(|node| {
        let kubeconfig = server.node_kubeconfig("xwire-system", "xwired", node, "127.0.0.1");
        server.client_for(&kubeconfig)
    });
    let unbound = server.client_for(&server.service_account_kubeconfig(
        "xwire-system",
        "xwired",
        "127.0.0.1",
    ));
    let signer = "xwire.dev/node";

    // Each node: a certificate for its own name, chaining to the bundle's CA.
    let bundle: Api<ConfigMap> = Api::namespaced(kc1.clone(), "xwire-system");
    let ca_pem = server
        .runtime
        .block_on(bundle.get("xwire-ca-bundle"))
        .unwrap()
        .data
        .unwrap()["ca.crt"]
        .clone();
    for (client, node) in [(&kc1, "kc1"), (&kc2, "kc2")] {
        let (name, request) = post(&server, client, node, signer);
        let cert = answer(&server, &name).unwrap();
        let identity = request.identity(&cert, &ca_pem).unwrap();
        assert_eq!(identity.node_name, node);
        identity.tls_parts().unwrap();
    }

    // Not for the other node, nor from a token that names no node.
    let (stolen, _) = post(&server, &kc1, "kc2", signer);
    let refusal = answer(&server, &stolen).unwrap_err();
    assert!(refusal.contains("not only the node kc1"), "{refusal}");
    let (nameless, _) = post(&server, &unbound, "kc1", signer);
    let refusal = answer(&server, &nameless).unwrap_err();
    assert!(refusal.contains("names 0 nodes"), "{refusal}");

    // A node can neither read the CA key nor approve a request itself.
    let secrets: Api<Secret> = Api::namespaced(kc1.clone(), "xwire-system");
    let error = server
        .runtime
        .block_on(secrets.get("xwire-ca"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("forbidden"), "{error}");
    let (own, _) = post(&server, &kc1, "kc1", "example.com/self-approved");
    let api: Api<CertificateSigningRequest> = Api::all(kc1.clone());
    let mut csr = server.runtime.block_on(api.get(&own)).unwrap();
    csr.status.get_or_insert_with(Default::default).conditions = Some(vec![
        k8s_openapi::api::certificates::v1::CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        },
    ]);
    let error = server
        .runtime
        .block_on(api.replace_subresource(
            "approval",
            &own,
            &PostParams::default(),
            serde_json::to_vec(&csr).unwrap(),
        ))
        .unwrap_err()
        .to_string();
    assert!(error.contains("forbidden"), "{error}");
}

#[test]
fn two_daemons_that_hold_no_ca_key_connect_with_their_signed_certificates() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    // kube_nodes starts the signer; each daemon asks it for its certificate.
    let (a, b) = apiserver::kube_nodes(&server, &support::xwired(), NODES, "");
    let up = |node: &support::Node, peer: &str| match node.ask(&Request::Counters).unwrap() {
        Response::Counters(counters) => counters.peers.iter().any(|p| p.node == peer && p.up),
        other => panic!("{other:?}"),
    };
    let connected = support::eventually(Duration::from_secs(20), || up(&a, "kc2") && up(&b, "kc1"));
    assert!(connected, "{}\n{}", a.log(), b.log());
    let logs = a.log() + &b.log();
    assert!(
        logs.contains("asked the cluster's signer for this node's certificate"),
        "{logs}"
    );
    assert!(server.signer_log().contains("signed a node certificate"));
}

#[test]
fn a_request_that_came_before_the_ca_is_signed_once_the_ca_is_there() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    // `xwirectl ca-secret` prints the Secret, then the bundle: the bundle alone first.
    let printed = support::ca_secret();
    let (secret, bundle) = printed.split_once("\n---\n").unwrap();
    apiserver::install(&server, NODES, bundle);
    server.start_signer(&signer_bin());
    let kubeconfig = server.node_kubeconfig("xwire-system", "xwired", "kc1", "127.0.0.1");
    let kc1 = server.client_for(&kubeconfig);
    let (name, _) = post(&server, &kc1, "kc1", "xwire.dev/node");
    std::thread::sleep(Duration::from_secs(2));
    let api: Api<CertificateSigningRequest> = Api::all(server.client.clone());
    let pending = server.runtime.block_on(api.get(&name)).unwrap();
    assert_eq!(pending.status.unwrap_or_default(), Default::default());
    server.apply(secret, false).unwrap();
    let cert = answer(&server, &name).unwrap();
    assert!(cert.contains("BEGIN CERTIFICATE"));
}
