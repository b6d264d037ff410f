//! The node: what the daemon knows and owns (the store, the node's namespace, the fast
//! path and its peers), and the answers to local API requests. It runs on one thread;
//! the API server and the peer desk (which reads what peers say on a thread of its own,
//! `peer_desk.rs`) hand it work in turn, so every change to a pod's wires is serialized.

mod apply;
mod calls;
mod capture;
mod claims;
mod cni_calls;
mod counters;
mod desk_view;
mod error;
mod fastpath;
mod journal;
mod observe;
mod peer_desk;
mod peers;
mod plan;
mod planned_end;
mod pod_netns;
mod pod_routing;
mod pools;
mod ports;
mod reconcile;
mod records;
mod refusals;
mod settings;
mod state;
mod steered;
mod switched;
mod topology_calls;
mod unwiring;
mod vxlan;
mod wiring;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use xwire_fastpath::link_table::PortId;
use xwire_fastpath::peer::NodeIdentity;
use xwire_proto::control::WireKey;
use xwire_proto::local::Response;

use crate::config::{Backend, DaemonConfig};
use crate::membership::{Configured, Membership};
use crate::metrics::NodeMetrics;
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{
    AttachmentKey, EmbeddedStore, EndKey, KubeSettings, KubeStore, NodeStore, StoreError,
};

pub use calls::Answer;
pub use capture::CaptureStream;
pub use error::{ErrorKind, NodeError};
pub(crate) use journal::Journal;
pub use journal::Step;
pub use reconcile::Reconciled;

pub use fastpath::worker_index;
use fastpath::Fastpath;
use records::{Records, Remember};

/// A wire end another node told this node about.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RemoteEnd {
    node: String,
    pod: String,
}

/// The node: its configuration and metrics, and five parts a reader can name. Each part
/// holds the methods that need it alone (in the files named for what they do); what
/// needs several parts at once (a pass, a CNI call, a peer's claim) is the node's.
pub struct Node {
    config: DaemonConfig,
    /// The histograms the metrics endpoint serves (reconcile passes recorded here).
    metrics: Arc<NodeMetrics>,
    records: Records,
    /// Who its peers are and which pool it is in, as they change: apart from the store.
    membership: Box<dyn Membership>,
    data: DataPlane,
    peers: PeerBook,
    netns: Namespaces,
    routing: Routing,
}

/// What the node made in the fast path and runs there: the handle on its workers, the
/// ports of its wire ends, steered wires and captures.
struct DataPlane {
    fastpath: Option<Fastpath>,
    /// Fast-path ports of this node's remote and switched wire ends, by wire record key.
    ports: ports::Ports,
    /// The ports on the node's VXLAN devices of bridged VXLAN ends (see `vxlan.rs`); the
    /// pod side's port is in `ports`.
    tunnel_ports: HashMap<EndKey, PortId>,
    /// Ends whose impairment the next sync tells whatever pods its pass is about: those
    /// opened since the last, and those whose remote link was not up yet.
    impairments_unsynced: HashSet<EndKey>,
    /// Same-node wires steered through the switch now, and their two ports (see
    /// `steered.rs`).
    steered: HashMap<WireKey, steered::SteeredPorts>,
    /// Captures running, by wire: each holds its wire on the switch path while its
    /// reader lives (see `capture.rs`).
    captures: HashMap<WireKey, Vec<std::sync::Weak<()>>>,
}

/// What the node knows of its peers' wire ends and claims (see `peers.rs`).
struct PeerBook {
    /// Wire ends on other nodes, by wire: learned from AddWire and Sync.
    remote_ends: HashMap<WireKey, RemoteEnd>,
    /// The wires listed so far by a peer's Sync that is still coming in parts.
    sync_in_progress: HashMap<String, HashSet<WireKey>>,
    /// Claims to a wire's far end refused since the start, by the peer desk and by the
    /// node's own judgement (see `claims.rs`).
    refused_claims: Arc<AtomicU64>,
    /// Where the node's own refusals are counted and logged.
    refusals: refusals::RefusalBook,
    /// Claims judged on this thread since the start: those the peer desk passed.
    claims_judged: u64,
    /// The peer desk: reads what peers say on a thread of its own (see `peer_desk.rs`).
    desk: Option<peer_desk::PeerDesk>,
    /// Whether the last turn at the desk's news ended with news left (`has_peer_backlog`).
    turn_ran_out: bool,
    /// Pods with an end whose far end a peer has just announced: joined by the pass
    /// that follows the batch of peer events.
    to_join: BTreeSet<(String, String)>,
    /// Far ends their node let go of, and which node that was: ends joined to them go
    /// back to pending on the pass that follows (then they are forgotten here).
    withdrawn: HashMap<WireKey, String>,
}

/// The network namespaces the node works in: its own, and the host's.
struct Namespaces {
    node_ns: NetnsFd,
    /// The host's network namespace, where the daemon may open it (a pod's is never it).
    host_ns: Option<NetnsFd>,
}

/// The node's routing beyond its wires: pods' routes and rules, and the node pools.
struct Routing {
    /// Pods given routes or rules since the start, by attachment key (see
    /// `pod_routing.rs`).
    routed_pods: HashSet<AttachmentKey>,
    /// This node's part in the node pools, when there are pools.
    pools: Option<pools::PoolRole>,
    /// The node's certificate: a gateway made later (pools from Node labels) needs it.
    identity: Option<NodeIdentity>,
}

/// A fast-path port of a wire end (remote, or switched on this node), the wire whose
/// frames it carries, the pod whose end it is, and the impairment the worker was told
/// for that pod's egress.
struct OpenPort {
    id: PortId,
    wire: WireKey,
    /// `wire`'s id, made once: it is a SHA-256 digest, and scans of every port compare it.
    wire_id: xwire_proto::WireId,
    pod: String,
    impairment: Option<xwire_fastpath::impairment::ImpairmentSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the node's network namespace: {0}")]
    Netns(#[from] crate::netns::NetnsError),
    #[error("the fast path: {0}")]
    Fastpath(String),
}

impl Node {
    /// Opens the store and, when the node has peers, starts the fast path and declares
    /// them. The calling thread's network namespace is the node's.
    pub fn start(config: DaemonConfig) -> Result<Node, StartError> {
        let (store, membership): (Box<dyn NodeStore>, Box<dyn Membership>) =
            match config.topology.source {
                Backend::Kubernetes => {
                    let mut settings = KubeSettings {
                        topology: config.topology.clone(),
                        peer_port: config.node_address.port(),
                        state_dir: config.state_dir.clone(),
                    };
                    if config.certs.is_some() {
                        // Files named in the configuration win over the cluster's CA and
                        // signer.
                        settings.topology.ca_secret.clear();
                        settings.topology.certificate_signer.clear();
                    }
                    let (store, membership) = KubeStore::open(
                        &config.node_name,
                        &config.node_address.ip().to_string(),
                        settings,
                    )?;
                    (Box::new(store), membership)
                }
                Backend::Embedded => (
                    Box::new(EmbeddedStore::open(&config.state_dir)?),
                    Box::new(Configured),
                ),
            };
        let node_ns = NetnsFd::current()?;
        let identity = match &config.certs {
            Some(certs) => Some(
                NodeIdentity::load(&config.node_name, &certs.cert, &certs.key, &certs.ca)
                    .map_err(|e| StartError::Fastpath(format!("node identity: {e}")))?,
            ),
            None => store.node_identity()?,
        };
        let pools = match &config.pools {
            // From the Node labels: made by the first membership pump below.
            _ if config.topology.pools_from_labels => None,
            None => None,
            Some(pools) => Some(
                pools::PoolRole::start(
                    &config.node_name,
                    config.node_address.ip(),
                    pools,
                    identity.as_ref(),
                )
                .map_err(|e| StartError::Fastpath(format!("node pools: {e}")))?,
            ),
        };
        let kept_identity = identity.clone();
        let fastpath = match identity {
            None => None,
            Some(identity) => Some(Fastpath::start(&config, identity)?),
        };
        let refused_claims = Arc::new(AtomicU64::new(0));
        let metrics = Arc::new(NodeMetrics::default());
        let mut node = Node {
            config,
            metrics: Arc::clone(&metrics),
            records: Records::new(store),
            membership,
            data: DataPlane {
                fastpath,
                ports: ports::Ports::default(),
                tunnel_ports: HashMap::new(),
                impairments_unsynced: HashSet::new(),
                steered: HashMap::new(),
                captures: HashMap::new(),
            },
            peers: PeerBook {
                remote_ends: HashMap::new(),
                sync_in_progress: HashMap::new(),
                refused_claims: Arc::clone(&refused_claims),
                refusals: refusals::RefusalBook::new(refused_claims, metrics),
                claims_judged: 0,
                desk: None,
                turn_ran_out: false,
                to_join: BTreeSet::new(),
                withdrawn: HashMap::new(),
            },
            netns: Namespaces {
                node_ns,
                host_ns: NetnsFd::open(std::path::Path::new("/proc/1/ns/net")).ok(),
            },
            routing: Routing {
                routed_pods: HashSet::new(),
                pools,
                identity: kept_identity,
            },
        };
        node.routing.sync_pool_routes(&node.netns.node_ns);
        // A start that finds records is a restart: this pass re-attaches to what the last
        // run made. What it cannot do now (a peer not up yet) a later pass or the peer's
        // Sync finishes.
        node.pump_membership();
        let started = std::time::Instant::now();
        match node.reconcile() {
            Ok(done) => tracing::info!(
                changes = done.changes.len(),
                failures = done.failures.len(),
                took_ms = started.elapsed().as_millis() as u64,
                "start: reconciled with the store"
            ),
            Err(e) => tracing::error!("start: reconciling failed: {}: {}", e.msg, e.details),
        }
        node.open_desk();
        Ok(node)
    }

    /// Writes the store's batch (one commit, not one per record) and returns the
    /// responses of the calls made in it, each with whether it changes
    /// anything (`calls::changes`). A batch that could not be written turns each success
    /// of a changing call into the store's error: the calls are retried, and the writes
    /// with them. With no such call (the node's own work), the failure is logged.
    pub(crate) fn commit(&mut self, responses: Vec<(bool, Response)>) -> Vec<Response> {
        let written = step_times::time(step_times::STORE_COMMIT, || self.records.store.end_batch());
        let Err(e) = written else {
            return responses.into_iter().map(|(_, r)| r).collect();
        };
        let error = NodeError::from(e).to_cni();
        let mut reported = false;
        let failed = responses
            .into_iter()
            .map(|(changes, response)| match response {
                Response::Error(_) => response,
                _ if changes => {
                    reported = true;
                    Response::Error(error.clone())
                }
                _ => response,
            })
            .collect();
        if !reported {
            tracing::error!("writing the store: {}: {}", error.msg, error.details);
        }
        failed
    }

    /// Begins a batch of store writes, made durable together (see `commit`): for a call
    /// (`Call::answer_batched`), and the node's own work between requests.
    pub(crate) fn begin_batch(&self) {
        self.records.store.begin_batch();
    }

    /// Whether the last `pump_peer_events` ran out of its turn with news left. News that
    /// came after it waits for the next request or `PEER_POLL`, as events did when the
    /// node read them itself: a node that went on with each piece as it came ran a pass
    /// for each while CNI calls waited (`api_server::PEER_POLL`).
    pub(crate) fn has_peer_backlog(&self) -> bool {
        self.peers.turn_ran_out
    }

    /// The node's histograms, for the metrics endpoint and the API server to share.
    pub fn metrics(&self) -> Arc<NodeMetrics> {
        Arc::clone(&self.metrics)
    }

    pub fn config(&self) -> &DaemonConfig {
        &self.config
    }
}
