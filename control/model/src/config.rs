//! `xwired`'s configuration file (TOML). Every field has a default, so an empty file is
//! a valid configuration for a single node with no peers; an unknown or malformed field
//! is an error that names the field and its line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use xwire_proto::control::Carrier;

use crate::pools::{PoolSpec, Pools, TUNNEL_OVERHEAD};
use crate::route::PolicySettings;
use crate::worker_defaults::{
    DEFAULT_COALESCE, DEFAULT_FRAMES_PER_PORT, DEFAULT_IDLE_SPIN, DEFAULT_MIN_FRAMES_PER_PORT,
    DEFAULT_RESTING_FRAMES_PER_WORKER, DEFAULT_WORKER_NICE,
};

/// The signer name of xwire's node certificates (a CertificateSigningRequest's
/// `signerName`), which `xwire-signer` answers.
pub const SIGNER_NAME: &str = "xwire.dev/node";

/// Where the plugin finds the daemon unless its configuration says otherwise.
pub const DEFAULT_API_SOCKET: &str = "/run/xwire/xwired.sock";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DaemonConfig {
    /// This node's name, as peers and wire records know it. Default: the host name.
    pub node_name: String,
    /// The UDP address this node listens on for its peers, and that they dial.
    /// Default `0.0.0.0:7470`.
    pub node_address: SocketAddr,
    /// Where the wire store lives. Default `/var/lib/xwire`.
    pub state_dir: PathBuf,
    /// The local API's Unix socket, created with mode 0600. Default
    /// `/run/xwire/xwired.sock`.
    pub api_socket: PathBuf,
    /// Cores for the data plane: a worker per core, pinned to it (control/README.md).
    /// Default: none, one worker that the scheduler places.
    pub data_cores: Vec<usize>,
    /// Keep the worker passing over its ports without pause (benchmarks: a core per
    /// worker); otherwise it paces its passes (`coalesce_us`, `idle_spin_us`). Default
    /// false.
    pub busy_poll: bool,
    /// Without busy_poll: microseconds the worker keeps passing over its ports (every
    /// `coalesce_us`) after its last frame before it sleeps until a frame wakes it.
    /// Default 200.
    pub idle_spin_us: u64,
    /// Without busy_poll, while traffic flows: microseconds the worker lets frames gather
    /// between passes (interrupt coalescing), stretched to one and a half times as long
    /// where fewer than six frames would come: at most that much latency per node a frame
    /// crosses, for a fraction of the CPU of a worker woken per frame; 0 passes again at
    /// once. Default 50.
    pub coalesce_us: u64,
    /// The data-plane workers' nice value, -20 to 19. At -20, while frames flow, a
    /// worker keeps its core from ordinary threads (a build, pods pinned there), which
    /// would otherwise take it for a scheduler slice at a time while the ports' fill rings
    /// run empty; an idle worker sleeps as before. Refused (no `CAP_SYS_NICE`), the
    /// worker keeps the daemon's and the log says so. Default -20.
    pub worker_nice: i8,
    /// The underlay MTU between nodes. Default 1500.
    pub underlay_mtu: u16,
    /// The most fast-path ports (remote wire ends) this node holds. Default 4096. A port
    /// costs memory only while it is open.
    pub max_ports: usize,
    /// The most UMEM frames a fast-path port grows to, pinned while the port has them:
    /// 2 KiB each where the wire's frames fit in one (MTUs up to 1774), 4 KiB otherwise.
    /// A port opens at its resting size (`resting_frames_per_worker`) and is resized
    /// while it runs, without
    /// losing a frame, to 20 ms of the traffic it carries (all but an eighth of its
    /// frames wait in its fill ring for a burst). Default 4096 (8 MiB for a port that
    /// carries 200 kpps or more).
    pub frames_per_port: usize,
    /// The fewest UMEM frames a port rests at: what an idle wire end pins on a node
    /// with many. Default 128 (256 KiB); above `frames_per_port`, it is
    /// `frames_per_port` (ports are then never resized). The kernel zeroes and pins
    /// every frame as a port opens, so a restart takes longer with more.
    pub min_frames_per_port: usize,
    /// The UMEM frames a data-plane worker's idle ports share: a port opens with, and
    /// shrinks back to after 30 s of little traffic, this divided by the worker's open
    /// ports (a power of two between `min_frames_per_port` and `frames_per_port`).
    /// Default 16384 (32 MiB at 2 KiB): up to 4 ports rest at 4096 frames, 128 or more
    /// at 128. 0 rests every port at `min_frames_per_port`.
    pub resting_frames_per_worker: usize,
    /// Seconds between reconciliation passes when nothing else triggers one (a pass also
    /// runs at start and whenever the daemon is idle after requests or peer messages).
    /// Default 10; 0 turns the timer off.
    pub reconcile_interval_secs: u64,
    /// The node certificate, its key and the cluster CA. Without them the node makes
    /// only same-node wires.
    pub certs: Option<CertPaths>,
    /// Where pods' links come from.
    pub topology: TopologySettings,
    /// The other nodes this node may share wires with.
    pub peers: Vec<PeerNode>,
    /// Where to serve Prometheus metrics (`GET /metrics`), e.g. `"127.0.0.1:9470"`.
    /// Default: none, no endpoint.
    pub metrics_address: Option<SocketAddr>,
    /// The network namespace to open the metrics socket in (a path such as
    /// `/proc/1/ns/net`). Default: the daemon's own.
    pub metrics_netns: Option<PathBuf>,
    /// Chain the plugin into the node's primary CNI configuration while the daemon runs
    /// (a cluster's DaemonSet); none: the conflist is someone else's business (the lab).
    pub chain: Option<ChainConfig>,
    /// Routing in pods (router mode's tables and rules).
    pub routing: RoutingConfig,
    /// Node pools (docs/routing.md): this node's pool, and every pool's CIDRs and
    /// gateways. None: every peer is reached directly.
    pub pools: Option<PoolsConfig>,
}

/// `[chain]` in `xwired.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainConfig {
    /// The runtime's CNI configuration directory. Default `/etc/cni/net.d`.
    #[serde(default = "default_conf_dir")]
    pub conf_dir: PathBuf,
    /// Where the runtime looks for plugin binaries. Default `/opt/cni/bin`.
    #[serde(default = "default_bin_dir")]
    pub bin_dir: PathBuf,
    /// The plugin binary to install into `bin_dir` as `xwire` (the image's copy); none:
    /// the binary is installed some other way.
    #[serde(default)]
    pub plugin_binary: Option<PathBuf>,
    /// Keys of xwire's entry besides `type` (`socket`, `reportIPs`; see cni/README.md).
    #[serde(default)]
    pub entry: serde_json::Map<String, Value>,
    /// Where the bytes of each file as they were before xwire chained into it are kept,
    /// to be put back exactly on uninstall, also after a restart. Default: `chain` in
    /// the daemon's `state_dir`.
    #[serde(default)]
    pub state_dir: Option<PathBuf>,
}

fn default_conf_dir() -> PathBuf {
    PathBuf::from("/etc/cni/net.d")
}

fn default_bin_dir() -> PathBuf {
    PathBuf::from("/opt/cni/bin")
}

/// `[pools]` and its `[[pools.pool]]` entries.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolsConfig {
    /// The pool this node is in (with `[topology] pools_from_labels`, its Node label).
    #[serde(default)]
    pub member_of: String,
    /// Every pool (with `pools_from_labels`, made from the Node labels instead).
    #[serde(default, rename = "pool")]
    pub pools: Vec<PoolSpec>,
    /// The routing table of the routes to the other pools. Default 900.
    #[serde(default = "default_pool_table")]
    pub table: u32,
    /// The priority of the `to CIDR lookup TABLE` rules. Default 900.
    #[serde(default = "default_pool_table")]
    pub rule_priority: u32,
    /// The MTU between the pools' gateways; the tunnel carries packets of this less
    /// `TUNNEL_OVERHEAD`, and `underlay_mtu` may be no more. Default 1500.
    #[serde(default = "default_wan_mtu")]
    pub wan_mtu: u16,
}

fn default_pool_table() -> u32 {
    900
}

fn default_wan_mtu() -> u16 {
    1500
}

impl Default for PoolsConfig {
    fn default() -> Self {
        PoolsConfig {
            member_of: String::new(),
            pools: Vec::new(),
            table: default_pool_table(),
            rule_priority: default_pool_table(),
            wan_mtu: default_wan_mtu(),
        }
    }
}

impl PoolsConfig {
    /// The largest packet the tunnels between pools carry.
    pub fn tunnel_mtu(&self) -> u16 {
        self.wan_mtu.saturating_sub(TUNNEL_OVERHEAD)
    }
}

/// `[routing]`: router mode's defaults (docs/routing.md).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutingConfig {
    /// Router mode for pods whose Topology does not say (`policy_routing`). Default false.
    pub policy_routing: bool,
    /// The routing table of a pod's first addressed interface (by link uid); the next
    /// one's is one more. Default 1000.
    pub first_table: u32,
    /// The priority of the per-interface rules. Default 1000 (before `main`, 32766).
    pub rule_priority: u32,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        let settings = PolicySettings::default();
        RoutingConfig {
            policy_routing: false,
            first_table: settings.first_table,
            rule_priority: settings.rule_priority,
        }
    }
}

impl RoutingConfig {
    pub fn settings(&self) -> PolicySettings {
        PolicySettings {
            first_table: self.first_table,
            rule_priority: self.rule_priority,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The node's store: chosen once, at start (`Node::start`); nothing else compares names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The default: the redb store under `state_dir`, fed by `xwirectl topology apply`.
    Embedded,
    /// Topology objects from the API server, and the wire store in GWireKObj objects.
    Kubernetes,
}

/// The `[topology]` table: where Topology objects and the wire records come from.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopologySettings {
    /// Where topologies and wire records live (see `Backend`).
    pub source: Backend,
    /// With `kubernetes`: a kubeconfig file; none: the in-cluster service account (or
    /// `KUBECONFIG`).
    pub kubeconfig: Option<PathBuf>,
    /// With `kubernetes`: pods are wired only in namespaces with this label set to
    /// `enabled`. Default `xwire.dev/wire`; an empty string wires every namespace.
    pub namespace_label: String,
    /// With `kubernetes`: how long the start waits for the first list of Topology
    /// objects. Default 30.
    pub sync_timeout_secs: u64,
    /// With `kubernetes` and no `[certs]`: the Secret (`namespace/name`) holding the
    /// cluster CA (`ca.crt`, `ca.key`), from which the node issues its own certificate at
    /// start: every node then holds the CA key. Default empty: the node asks
    /// `certificate_signer` instead.
    pub ca_secret: String,
    /// With `kubernetes`, no `[certs]` and no `ca_secret`: the node makes its key and asks
    /// for its certificate with a CertificateSigningRequest of this signer name, which
    /// `xwire-signer` signs for the node that the daemon's token names. Default
    /// `xwire.dev/node`; empty: no certificate from the cluster.
    pub certificate_signer: String,
    /// With `certificate_signer`: the ConfigMap (`namespace/name`, or `name` in the
    /// daemon's own namespace) whose `ca.crt` holds the CA certificates the node trusts.
    /// Default `xwire-system/xwire-ca-bundle`.
    pub ca_bundle: String,
    /// With `certificate_signer`: how long the start waits for the certificate. Default
    /// 120.
    pub certificate_timeout_secs: u64,
    /// With `kubernetes`: the other Node objects are the node's peers (at their
    /// InternalIP and this node's `node_address` port), followed as nodes join and
    /// leave. Default true.
    pub discover_peers: bool,
    /// With `kubernetes` and `discover_peers`: node pools come from the Node objects'
    /// labels (`xwire.dev/pool`, `xwire.dev/gateway`, `xwire.dev/pool-nat`), followed as
    /// they change; `[pools]` then gives only the table, rule priority and WAN MTU.
    /// Default false.
    pub pools_from_labels: bool,
}

impl Default for TopologySettings {
    fn default() -> Self {
        TopologySettings {
            source: Backend::Embedded,
            kubeconfig: None,
            namespace_label: "xwire.dev/wire".into(),
            sync_timeout_secs: 30,
            ca_secret: String::new(),
            certificate_signer: SIGNER_NAME.into(),
            ca_bundle: "xwire-system/xwire-ca-bundle".into(),
            certificate_timeout_secs: 120,
            discover_peers: true,
            pools_from_labels: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerNode {
    pub name: String,
    pub address: SocketAddr,
    #[serde(default = "default_carrier", with = "carrier_name")]
    pub carrier: Carrier,
}

fn default_carrier() -> Carrier {
    Carrier::Datagram
}

/// `carrier = "datagram" | "stream" | "vxlan"`, the spelling topology files use too.
pub mod carrier_name {
    use serde::{Deserialize, Deserializer};
    use xwire_proto::control::Carrier;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Carrier, D::Error> {
        parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }

    pub fn parse(name: &str) -> Result<Carrier, String> {
        match name {
            "datagram" => Ok(Carrier::Datagram),
            "stream" => Ok(Carrier::Stream),
            "vxlan" => Ok(Carrier::Vxlan),
            other => Err(format!(
                "unknown carrier {other:?}, expected \"datagram\", \"stream\" or \"vxlan\""
            )),
        }
    }

    pub fn name(carrier: Carrier) -> &'static str {
        match carrier {
            Carrier::Datagram => "datagram",
            Carrier::Stream => "stream",
            Carrier::Vxlan => "vxlan",
        }
    }
}

impl Default for DaemonConfig {
    /// The fast path's settings are the worker's own defaults (`worker_defaults`), so
    /// that the perf scenarios, which run workers directly, measure what a daemon runs.
    fn default() -> Self {
        DaemonConfig {
            node_name: host_name(),
            node_address: SocketAddr::from(([0, 0, 0, 0], 7470)),
            state_dir: PathBuf::from("/var/lib/xwire"),
            api_socket: PathBuf::from(DEFAULT_API_SOCKET),
            data_cores: Vec::new(),
            busy_poll: false,
            idle_spin_us: DEFAULT_IDLE_SPIN.as_micros() as u64,
            coalesce_us: DEFAULT_COALESCE.as_micros() as u64,
            worker_nice: DEFAULT_WORKER_NICE,
            reconcile_interval_secs: 10,
            underlay_mtu: 1500,
            max_ports: 4096,
            frames_per_port: DEFAULT_FRAMES_PER_PORT,
            min_frames_per_port: DEFAULT_MIN_FRAMES_PER_PORT,
            resting_frames_per_worker: DEFAULT_RESTING_FRAMES_PER_WORKER,
            certs: None,
            topology: TopologySettings::default(),
            peers: Vec::new(),
            chain: None,
            routing: RoutingConfig::default(),
            pools: None,
            metrics_address: None,
            metrics_netns: None,
        }
    }
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|n| n.into_string().ok())
        // Kubernetes lower-cases host names into node names too.
        .map(|n| n.to_ascii_lowercase())
        .unwrap_or_else(|| "node".into())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// toml's message names the field, the line and the column.
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {field}: {message}")]
    Invalid {
        path: PathBuf,
        field: &'static str,
        message: String,
    },
}

impl DaemonConfig {
    /// Parses and checks a configuration; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<DaemonConfig, ConfigError> {
        let mut config: DaemonConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        config
            .check()
            .map_err(|(field, message)| ConfigError::Invalid {
                path: path.into(),
                field,
                message,
            })?;
        if let Some(chain) = &mut config.chain {
            chain
                .state_dir
                .get_or_insert_with(|| config.state_dir.join("chain"));
        }
        Ok(config)
    }

    /// What is wrong with the configuration, if anything: the field and why.
    fn check(&self) -> Result<(), Invalid> {
        self.check_names()?;
        self.check_pools()?;
        self.check_sizes()?;
        self.check_peers()
    }

    /// The node's and its peers' names.
    fn check_names(&self) -> Result<(), Invalid> {
        xwire_proto::control::check_node_name(&self.node_name).map_err(|e| ("node_name", e))?;
        for peer in &self.peers {
            xwire_proto::control::check_node_name(&peer.name).map_err(|e| ("peers", e))?;
        }
        Ok(())
    }

    /// The node pools, from the Node labels or configured, and the underlay MTU that their
    /// tunnels must carry.
    fn check_pools(&self) -> Result<(), Invalid> {
        if !(1280..=65535).contains(&self.underlay_mtu) {
            return Err((
                "underlay_mtu",
                format!("{} is below QUIC's minimum of 1280", self.underlay_mtu),
            ));
        }
        let labelled = self.topology.pools_from_labels;
        if labelled
            && (self.topology.source != Backend::Kubernetes || !self.topology.discover_peers)
        {
            return Err((
                "topology.pools_from_labels",
                "needs source = \"kubernetes\" and discover_peers".to_owned(),
            ));
        }
        if labelled {
            let base = self.pools.clone().unwrap_or_default();
            if self.underlay_mtu > base.tunnel_mtu() {
                return Err((
                    "underlay_mtu",
                    format!(
                        "{} does not fit the tunnel between pools ([pools] wan_mtu {} less {})",
                        self.underlay_mtu, base.wan_mtu, TUNNEL_OVERHEAD
                    ),
                ));
            }
        }
        let Some(pools) = self.pools.as_ref().filter(|_| !labelled) else {
            return Ok(());
        };
        let checked = Pools::new(&pools.pools).map_err(|e| ("pools", e))?;
        if checked.named(&pools.member_of).is_none() {
            return Err((
                "pools.member_of",
                format!("no pool is named {:?}", pools.member_of),
            ));
        }
        if let Some(pool) = checked.gateway_pool(&self.node_name) {
            if pool.name != pools.member_of {
                return Err((
                    "pools",
                    format!(
                        "this node is a gateway of pool {}, not of its own",
                        pool.name
                    ),
                ));
            }
        }
        if self.underlay_mtu > pools.tunnel_mtu() {
            return Err((
                "underlay_mtu",
                format!(
                    "{} does not fit the tunnel between pools (wan_mtu {} less {})",
                    self.underlay_mtu, pools.wan_mtu, TUNNEL_OVERHEAD
                ),
            ));
        }
        Ok(())
    }

    /// Ports per worker and frames per port.
    fn check_sizes(&self) -> Result<(), Invalid> {
        if !(1..=usize::from(u16::MAX)).contains(&self.max_ports) {
            return Err((
                "max_ports",
                format!("{} is not between 1 and 65535", self.max_ports),
            ));
        }
        for (key, frames) in [
            ("frames_per_port", self.frames_per_port),
            ("min_frames_per_port", self.min_frames_per_port),
        ] {
            if !(2..=1 << 20).contains(&frames) {
                return Err((key, format!("{frames} is not between 2 and 1048576")));
            }
        }
        if !(-20..=19).contains(&self.worker_nice) {
            return Err((
                "worker_nice",
                format!("{} is not a nice value (-20 to 19)", self.worker_nice),
            ));
        }
        if self.resting_frames_per_worker > 1 << 24 {
            return Err((
                "resting_frames_per_worker",
                format!("{} is above 16777216", self.resting_frames_per_worker),
            ));
        }
        Ok(())
    }

    /// A node with peers needs an identity (its files, or the cluster's signer or CA),
    /// and is not one of them.
    fn check_peers(&self) -> Result<(), Invalid> {
        if let Some(peer) = self.peers.iter().find(|p| !p.carrier.is_quic()) {
            return Err((
                "peers",
                format!(
                    "peer {:?}: a peer's carrier is \"datagram\" or \"stream\"; a wire takes \
                     kernel VXLAN when its link says `carrier: vxlan`",
                    peer.name
                ),
            ));
        }
        let kubernetes_identity = self.topology.source == Backend::Kubernetes
            && !(self.topology.ca_secret.is_empty() && self.topology.certificate_signer.is_empty());
        if !self.peers.is_empty() && self.certs.is_none() && !kubernetes_identity {
            return Err((
                "certs",
                "peers are configured, so the node needs its certificate, key and CA".into(),
            ));
        }
        if let Some(peer) = self.peers.iter().find(|p| p.name == self.node_name) {
            return Err(("peers", format!("{:?} is this node's own name", peer.name)));
        }
        Ok(())
    }
}

/// A field of the configuration that is wrong, and why.
type Invalid = (&'static str, String);

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DaemonConfig, ConfigError> {
        DaemonConfig::parse(text, Path::new("xwired.toml"))
    }

    #[test]
    fn an_empty_file_gives_the_documented_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config.api_socket, Path::new(DEFAULT_API_SOCKET));
        assert_eq!(config.state_dir, Path::new("/var/lib/xwire"));
        assert_eq!(config.node_address.port(), 7470);
        assert!(!config.busy_poll && config.peers.is_empty() && config.certs.is_none());
        // The fast path's settings are the worker's defaults, which the perf scenarios run
        // (the fast path's tests hold `WorkerConfig::default()` to the same).
        assert_eq!(config.coalesce_us as u128, DEFAULT_COALESCE.as_micros());
        assert_eq!(config.idle_spin_us as u128, DEFAULT_IDLE_SPIN.as_micros());
        assert_eq!(config.worker_nice, DEFAULT_WORKER_NICE);
        assert_eq!(
            (
                config.min_frames_per_port,
                config.frames_per_port,
                config.resting_frames_per_worker
            ),
            (
                DEFAULT_MIN_FRAMES_PER_PORT,
                DEFAULT_FRAMES_PER_PORT,
                DEFAULT_RESTING_FRAMES_PER_WORKER
            )
        );
    }

    #[test]
    fn port_limits_out_of_range_are_refused_by_name() {
        for (text, field) in [
            ("max_ports = 0", "max_ports"),
            ("max_ports = 70000", "max_ports"),
            ("frames_per_port = 1", "frames_per_port"),
            ("min_frames_per_port = 1", "min_frames_per_port"),
            ("worker_nice = 20", "worker_nice"),
            ("worker_nice = -21", "worker_nice"),
            (
                "resting_frames_per_worker = 20000000",
                "resting_frames_per_worker",
            ),
        ] {
            match parse(text) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_full_file_is_read() {
        let config = parse(
            r#"
node_name = "n1"
node_address = "10.0.0.1:7000"
state_dir = "/tmp/x"
api_socket = "/tmp/x/api.sock"
data_cores = [1]
busy_poll = true
coalesce_us = 20
worker_nice = 0
min_frames_per_port = 64
underlay_mtu = 9000
[certs]
ca = "/c/ca.pem"
cert = "/c/n1.pem"
key = "/c/n1.key"
[[peers]]
name = "n2"
address = "10.0.0.2:7000"
carrier = "stream"
"#,
        )
        .unwrap();
        assert_eq!(config.node_name, "n1");
        assert_eq!(config.data_cores, [1]);
        assert_eq!(config.peers[0].carrier, Carrier::Stream);
        assert_eq!(config.underlay_mtu, 9000);
        assert_eq!((config.coalesce_us, config.min_frames_per_port), (20, 64));
        assert_eq!(config.worker_nice, 0);
    }

    #[test]
    fn an_unknown_field_is_named_with_its_line() {
        let err = parse("node_name = \"n1\"\n\nbusy_pol = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("busy_pol") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn a_malformed_value_is_named_with_its_line() {
        let err = parse("node_name = \"n1\"\nnode_address = \"nowhere\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node_address") || err.contains("line 2"),
            "{err}"
        );
        assert!(err.contains("line 2"), "{err}");
        let err = parse("[[peers]]\nname = \"b\"\naddress = \"1.2.3.4:5\"\ncarrier = \"pigeon\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("pigeon") && err.contains("line 4"), "{err}");
        let err = parse("[[peers]]\nname = \"b\"\naddress = \"1.2.3.4:5\"\ncarrier = \"vxlan\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("carrier: vxlan"), "{err}");
    }

    #[test]
    fn the_kubernetes_source_and_its_fields_are_read() {
        let config = parse(
            "[topology]\nsource = \"kubernetes\"\nkubeconfig = \"/k\"\nnamespace_label = \"\"\ndiscover_peers = false\n[[peers]]\nname = \"b\"\naddress = \"1.2.3.4:5\"\n[chain]\n[chain.entry]\nsocket = \"/s\"\n",
        )
        .unwrap();
        let settings = &config.topology;
        assert_eq!(settings.kubeconfig.as_deref(), Some(Path::new("/k")));
        assert_eq!(settings.namespace_label, "");
        assert!(!settings.discover_peers);
        // Peers need no certificate files: the node asks the cluster's signer.
        assert_eq!(settings.ca_secret, "");
        assert_eq!(settings.certificate_signer, "xwire.dev/node");
        assert_eq!(settings.ca_bundle, "xwire-system/xwire-ca-bundle");
        assert_eq!(settings.certificate_timeout_secs, 120);
        let chain = config.chain.unwrap();
        assert_eq!(chain.conf_dir, Path::new("/etc/cni/net.d"));
        assert_eq!(chain.entry["socket"], "/s");
        assert_eq!(
            chain.state_dir.as_deref(),
            Some(Path::new("/var/lib/xwire/chain"))
        );
        let err = parse("[topology]\nsource = \"etcd\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("etcd"), "{err}");
    }

    #[test]
    fn peers_without_certificates_are_refused() {
        let err = parse("[[peers]]\nname = \"b\"\naddress = \"1.2.3.4:5\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("certs"), "{err}");
    }
}
