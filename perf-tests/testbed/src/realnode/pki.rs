//! The certificates a one-node cluster's components present to each other: one CA, a
//! serving certificate for the API server and for the kubelet, and a client certificate
//! per component, named as the API server's authorizers expect (`system:node:NAME` in
//! `system:nodes` for the kubelet, `system:masters` for the test's admin and for the API
//! server's calls to the kubelet).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Where each file is, under the directory `write` was given; and the CA, which issues
/// a second node's kubelet its certificates.
pub struct Pki {
    pub dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// A kubeconfig for `name`'s client certificate in `dir`, reaching the API server
    /// at `server`.
    pub fn kubeconfig(&self, name: &str, server: &str, dir: &Path) -> PathBuf {
        let path = dir.join(format!("{name}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: node\n  cluster:\n    server: {server}\n    certificate-authority: {}\nusers:\n- name: {name}\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: node\n  context: {{cluster: node, user: {name}}}\ncurrent-context: node\n",
            self.ca().display(),
            dir.join(format!("{name}.crt")).display(),
            dir.join(format!("{name}.key")).display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A kubelet's client and serving certificates for node `node` at `ip`, into `dir`
    /// (`kubelet.crt`, `kubelet-serving.crt` and their keys), with the CA's certificate.
    pub fn issue_kubelet(&self, dir: &Path, node: &str, ip: IpAddr) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::copy(self.ca(), dir.join("ca.crt")).unwrap();
        for leaf in kubelet_leaves(node, ip) {
            issue(dir, &leaf, &self.ca, &self.ca_key);
        }
    }
}

fn issue(dir: &Path, leaf: &Leaf, ca: &rcgen::Certificate, ca_key: &KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, leaf.common_name.clone());
    if let Some(organization) = leaf.organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![leaf.usage.clone()];
    params.subject_alt_names = leaf.names.clone();
    let cert = params.signed_by(&key, ca, ca_key).unwrap();
    std::fs::write(dir.join(format!("{}.crt", leaf.name)), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{}.key", leaf.name)), key.serialize_pem()).unwrap();
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

/// A kubelet's two certificates: as a client of the API server (the Node authorizer's
/// `system:node:NAME`), and as the server `kubectl exec` and logs reach.
fn kubelet_leaves(node: &str, ip: IpAddr) -> [Leaf<'static>; 2] {
    [
        Leaf {
            name: "kubelet",
            common_name: format!("system:node:{node}"),
            organization: Some("system:nodes"),
            usage: ExtendedKeyUsagePurpose::ClientAuth,
            names: Vec::new(),
        },
        Leaf {
            name: "kubelet-serving",
            common_name: format!("system:node:{node}"),
            organization: Some("system:nodes"),
            usage: ExtendedKeyUsagePurpose::ServerAuth,
            names: vec![SanType::IpAddress(ip), dns(node)],
        },
    ]
}

/// One certificate to issue: its file name, subject and what it is for.
#[derive(Clone)]
struct Leaf<'a> {
    name: &'a str,
    common_name: String,
    organization: Option<&'a str>,
    usage: ExtendedKeyUsagePurpose,
    names: Vec<SanType>,
}

/// The control plane's client certificates and their subjects.
fn clients() -> Vec<Leaf<'static>> {
    let client = |name, common_name: String, organization| Leaf {
        name,
        common_name,
        organization,
        usage: ExtendedKeyUsagePurpose::ClientAuth,
        names: Vec::new(),
    };
    vec![
        client("admin", "xwt-admin".into(), Some("system:masters")),
        client(
            "controller-manager",
            "system:kube-controller-manager".into(),
            None,
        ),
        client("scheduler", "system:kube-scheduler".into(), None),
        client(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client".into(),
            Some("system:masters"),
        ),
    ]
}

/// Issues every certificate into `dir`, and the service-account signing key pair.
/// `node_ip` is the address both servers listen on; `service_ip` the in-cluster
/// `kubernetes` Service's address, which pods dial for the API server.
pub fn write(dir: &Path, node: &str, node_ip: IpAddr, service_ip: IpAddr) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "xwt-node-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("ca.key"), ca_key.serialize_pem()).unwrap();

    let mut leaves = clients();
    leaves.push(Leaf {
        name: "apiserver",
        common_name: "kube-apiserver".into(),
        organization: None,
        usage: ExtendedKeyUsagePurpose::ServerAuth,
        names: vec![
            SanType::IpAddress(node_ip),
            SanType::IpAddress(service_ip),
            SanType::IpAddress(IpAddr::from([127, 0, 0, 1])),
            dns("localhost"),
            dns("kubernetes"),
            dns("kubernetes.default"),
            dns("kubernetes.default.svc"),
            dns("kubernetes.default.svc.cluster.local"),
        ],
    });
    leaves.extend(kubelet_leaves(node, node_ip));
    for leaf in &leaves {
        issue(dir, leaf, &ca, &ca_key);
    }

    let service_accounts = KeyPair::generate().unwrap();
    std::fs::write(dir.join("sa.key"), service_accounts.serialize_pem()).unwrap();
    std::fs::write(dir.join("sa.pub"), service_accounts.public_key_pem()).unwrap();
    Pki {
        dir: dir.to_path_buf(),
        ca,
        ca_key,
    }
}
