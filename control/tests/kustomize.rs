//! `kubectl apply -k`, as deploy/README.md says: each overlay (deploy/ for a cluster that
//! pulls, deploy/kind/ for kind) renders the whole install with its namespace and image
//! set in the one place, an overlay of the user's own moves everything to another
//! namespace, and a real API server takes the result. Skipped, with the reason, where
//! kubectl (or, for the last part, kube-apiserver) is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

use xwire_testbed::apiserver;
use xwire_testbed::cluster::TempDir;

fn deploy() -> PathBuf {
    std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")).unwrap()
}

/// `kubectl kustomize DIR`, or `None` (the test reported as skipped) without kubectl.
fn kustomize(dir: &Path) -> Option<String> {
    let out = match Command::new("kubectl").arg("kustomize").arg(dir).output() {
        Ok(out) => out,
        Err(e) => {
            xwire_testbed::skip(&format!("no kubectl ({e}): it renders the kustomizations"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

fn objects(yaml: &str) -> Vec<serde_json::Value> {
    use serde::Deserialize;
    serde_yaml_ng::Deserializer::from_str(yaml)
        .map(|doc| serde_json::Value::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn daemonset(objects: &[serde_json::Value]) -> &serde_json::Value {
    objects.iter().find(|o| o["kind"] == "DaemonSet").unwrap()
}

#[test]
fn each_overlay_renders_the_whole_install_and_a_users_overlay_moves_its_namespace() {
    let Some(plain) = kustomize(&deploy()) else {
        return;
    };
    let kind = kustomize(&deploy().join("kind")).unwrap();
    for (name, yaml) in [("deploy/", &plain), ("deploy/kind/", &kind)] {
        let objects = objects(yaml);
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        for expected in [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ConfigMap",
            "DaemonSet",
            "ValidatingAdmissionPolicy",
        ] {
            assert!(kinds.contains(&expected), "{name}: {kinds:?}");
        }
        let container = &daemonset(&objects)["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], "localhost/xwire:latest", "{name}");
        // Every namespaced object in the one namespace.
        for object in &objects {
            if let Some(namespace) = object["metadata"]["namespace"].as_str() {
                assert_eq!(namespace, "xwire-system", "{name}: {object}");
            }
        }
    }
    let pull = |yaml: &str| {
        daemonset(&objects(yaml))["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"]
            .clone()
    };
    assert_eq!(pull(&plain), "IfNotPresent");
    assert_eq!(pull(&kind), "Never");
    let signer_pull = |yaml: &str| {
        let objects = objects(yaml);
        let signer = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "xwire-signer")
            .expect("the signer's Deployment")
            .clone();
        signer["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"].clone()
    };
    assert_eq!(signer_pull(&plain), "IfNotPresent");
    assert_eq!(signer_pull(&kind), "Never");

    // An overlay of the user's own: one line moves everything, the Namespace object and
    // the bindings' subjects included; no manifest names the old namespace elsewhere.
    let dir = TempDir::new("kustomize");
    let base = deploy().join("base");
    let up = "../".repeat(dir.0.components().count() - 1);
    let relative = format!("{up}{}", base.display().to_string().trim_start_matches('/'));
    std::fs::write(
        dir.0.join("kustomization.yaml"),
        format!("namespace: net-labs\nresources: [{relative}]\nimages: [{{name: localhost/xwire, newTag: v9}}]\n"),
    )
    .unwrap();
    let moved = kustomize(&dir.0).unwrap();
    assert!(!moved.contains("xwire-system"), "{moved}");
    let moved_objects = objects(&moved);
    let namespace = moved_objects
        .iter()
        .find(|o| o["kind"] == "Namespace")
        .unwrap();
    assert_eq!(namespace["metadata"]["name"], "net-labs");
    let binding = moved_objects
        .iter()
        .find(|o| o["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["subjects"][0]["namespace"], "net-labs");
    assert_eq!(
        daemonset(&moved_objects)["spec"]["template"]["spec"]["containers"][0]["image"],
        "localhost/xwire:v9"
    );

    // A real API server takes the moved install as `kubectl apply -k` would send it.
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    server
        .apply(&moved, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let daemonsets: kube::Api<k8s_openapi::api::apps::v1::DaemonSet> =
        kube::Api::namespaced(server.client.clone(), "net-labs");
    let got = server.runtime.block_on(daemonsets.get("xwired")).unwrap();
    assert_eq!(got.metadata.namespace.as_deref(), Some("net-labs"));
}
