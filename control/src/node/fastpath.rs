//! The node's data plane: one worker per data core, each owning its wires' ports and its
//! own QUIC endpoint, and the peer nodes each worker connects to.
//!
//! A wire lives on one worker, the same on every node: `worker_index` of its id. Worker
//! `i` listens on the node's port plus `i` and connects to each peer node's worker `i`,
//! so a remote wire's frames go from the worker that holds it on one node straight to the
//! worker that holds it on the other: no frame crosses between cores, and each core does
//! the crypto of its own wires. Control messages (AddWire, DelWire, Sync) go over worker
//! 0's connection only, so the peer protocol is what it was with one worker; the other
//! workers' connections carry frames.
//!
//! Every node of a cluster therefore runs the same number of workers; `Fastpath::peers`
//! reports each connection, so a node whose peer runs fewer shows the missing ones down.

use std::collections::HashMap;
use std::net::SocketAddr;

use xwire_fastpath::peer::NodeIdentity;
use xwire_fastpath::peer::{Carrier, PeerConfig, PeerId};
use xwire_fastpath::stats::WorkerStats;
use xwire_fastpath::{
    PeerControl, PortInfo, RemotePort, WireId, Worker, WorkerConfig, WorkerError,
};

use super::StartError;
use crate::config::DaemonConfig;
use crate::step_times;

pub(super) struct Fastpath {
    workers: Vec<Worker>,
    /// Each peer node's id on every worker (index: the worker).
    peers: HashMap<String, Vec<PeerId>>,
    /// Each peer node's configured address (worker 0's), as written.
    pub(super) addresses: HashMap<String, String>,
}

/// The worker that holds wire `wire` among `workers`: the same on every node that runs
/// as many. Consecutive uids of one namespace go to consecutive workers (but where the
/// id's spread byte wraps, with a number of workers that does not divide 256).
pub fn worker_index(wire: WireId, workers: usize) -> usize {
    usize::from(wire.spread()) % workers.max(1)
}

/// Worker `index`'s address, given worker 0's: the next ports up.
fn worker_address(base: SocketAddr, index: usize) -> Option<SocketAddr> {
    let port = base.port().checked_add(u16::try_from(index).ok()?)?;
    Some(SocketAddr::new(base.ip(), port))
}

impl Fastpath {
    /// Starts a worker per data core (one, placed by the scheduler, when none are
    /// named), each listening for peers, and declares the configured peers to each.
    pub(super) fn start(
        config: &DaemonConfig,
        identity: NodeIdentity,
    ) -> Result<Fastpath, StartError> {
        let fail =
            |what: &str, e: &dyn std::fmt::Display| StartError::Fastpath(format!("{what}: {e}"));
        let cores: Vec<Option<usize>> = if config.data_cores.is_empty() {
            vec![None]
        } else {
            config.data_cores.iter().copied().map(Some).collect()
        };
        let mut fastpath = Fastpath {
            workers: Vec::new(),
            peers: HashMap::new(),
            addresses: HashMap::new(),
        };
        for (index, core) in cores.into_iter().enumerate() {
            let worker = Worker::spawn(WorkerConfig {
                core,
                busy_poll: config.busy_poll,
                idle_spin: std::time::Duration::from_micros(config.idle_spin_us),
                coalesce: std::time::Duration::from_micros(config.coalesce_us),
                nice: config.worker_nice,
                max_ports: config.max_ports,
                frames_per_port: config.frames_per_port,
                min_frames_per_port: config.min_frames_per_port,
                resting_frames_per_worker: config.resting_frames_per_worker,
                ..WorkerConfig::default()
            })
            .map_err(|e| fail(&format!("start worker {index}"), &e))?;
            let address = worker_address(config.node_address, index).ok_or_else(|| {
                StartError::Fastpath(format!(
                    "worker {index} has no port: node_address's port plus {index} is above 65535"
                ))
            })?;
            let mut peer_config = PeerConfig::new(identity.clone(), address);
            peer_config.underlay_mtu = config.underlay_mtu;
            worker
                .attach_peers(peer_config)
                .map_err(|e| fail(&format!("worker {index}: listen on {address}"), &e))?;
            fastpath.workers.push(worker);
        }
        for peer in &config.peers {
            fastpath
                .add_peer(&peer.name, peer.address, peer.carrier)
                .map_err(|e| fail(&format!("peer {}", peer.name), &e))?;
        }
        Ok(fastpath)
    }

    /// The index of the worker that holds `wire`.
    pub(super) fn index_of(&self, wire: WireId) -> usize {
        worker_index(wire, self.workers.len())
    }

    /// The worker that holds `wire`.
    pub(super) fn worker_of(&self, wire: WireId) -> &Worker {
        &self.workers[self.index_of(wire)]
    }

    /// Declares peer node `name` at `address` (its worker 0's) to every worker, each to
    /// dial its counterpart; a known peer's address is updated.
    pub(super) fn add_peer(
        &mut self,
        name: &str,
        address: SocketAddr,
        carrier: Carrier,
    ) -> Result<bool, WorkerError> {
        let mut ids = Vec::with_capacity(self.workers.len());
        for (index, worker) in self.workers.iter().enumerate() {
            // A port beyond the last one: that worker's connection is never made, and
            // shows down.
            let address = worker_address(address, index).unwrap_or(address);
            ids.push(worker.add_peer(name, address, carrier)?);
        }
        self.addresses.insert(name.to_owned(), address.to_string());
        Ok(self.peers.insert(name.to_owned(), ids).is_none())
    }

    /// Retires peer node `name` on every worker; says whether it was known.
    pub(super) fn retire_peer(&mut self, name: &str) -> Result<bool, WorkerError> {
        let Some(ids) = self.peers.remove(name) else {
            return Ok(false);
        };
        for (worker, id) in self.workers.iter().zip(ids) {
            worker.retire_peer(id)?;
        }
        Ok(true)
    }

    pub(super) fn peer_names(&self) -> impl Iterator<Item = &String> {
        self.peers.keys()
    }

    pub(super) fn has_peer(&self, name: &str) -> bool {
        self.peers.contains_key(name)
    }

    /// Peer `name`'s id on the worker that holds `wire`.
    pub(super) fn peer_for(&self, name: &str, wire: WireId) -> Option<PeerId> {
        Some(self.peers.get(name)?[self.index_of(wire)])
    }

    /// A handle on each worker's peers, by worker index, for the peer desk.
    pub(super) fn peer_controls(&self) -> Result<Vec<PeerControl>, WorkerError> {
        self.workers.iter().map(Worker::peer_control).collect()
    }

    /// Sends a control message over the control connection (worker 0's) to peer `name`:
    /// `Ok(false)` while it is down.
    pub(super) fn send_control(
        &self,
        name: &str,
        message: xwire_proto::control::ControlMessage,
    ) -> Result<bool, WorkerError> {
        step_times::time(step_times::PEER_MESSAGES, || match self.peers.get(name) {
            Some(ids) => self.workers[0].send_control(ids[0], message),
            None => Ok(false),
        })
    }

    /// Opens remote ports, each on the worker of its wire, the ports of one worker in
    /// one batch; the answers in the order of `ports`.
    pub(super) fn add_remote_ports(
        &self,
        ports: &[RemotePort],
    ) -> Vec<Result<PortInfo, WorkerError>> {
        step_times::time(step_times::PORT_OPEN, || self.add_remote_ports_now(ports))
    }

    fn add_remote_ports_now(&self, ports: &[RemotePort]) -> Vec<Result<PortInfo, WorkerError>> {
        if let [only] = &self.workers[..] {
            return only.add_remote_ports(ports);
        }
        let mut answers: Vec<Option<Result<PortInfo, WorkerError>>> =
            ports.iter().map(|_| None).collect();
        for (index, worker) in self.workers.iter().enumerate() {
            let (positions, mine): (Vec<usize>, Vec<RemotePort>) = ports
                .iter()
                .enumerate()
                .filter(|(_, p)| self.index_of(p.wire) == index)
                .map(|(at, p)| (at, p.clone()))
                .unzip();
            if mine.is_empty() {
                continue;
            }
            for (at, answer) in positions.into_iter().zip(worker.add_remote_ports(&mine)) {
                answers[at] = Some(answer);
            }
        }
        answers
            .into_iter()
            .map(|a| a.expect("every port went to a worker"))
            .collect()
    }

    /// Every worker's counters, by worker index.
    pub(super) fn stats(&self) -> Result<Vec<WorkerStats>, WorkerError> {
        self.workers.iter().map(Worker::stats).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wire_has_one_worker_everywhere_and_uids_spread_over_the_workers() {
        for workers in 1..5 {
            let mut seen = vec![0; workers];
            for uid in 1..=100 {
                let wire = WireId::new("lab", uid);
                let index = worker_index(wire, workers);
                assert!(index < workers);
                assert_eq!(index, worker_index(WireId::new("lab", uid), workers));
                seen[index] += 1;
            }
            // Consecutive uids take turns: each worker gets its share.
            assert!(seen.iter().all(|&n| n >= 100 / workers), "{seen:?}");
        }
        assert_eq!(worker_index(WireId::new("x", 5), 0), 0);
    }

    #[test]
    fn workers_listen_on_the_ports_after_the_nodes() {
        let base: SocketAddr = "10.0.0.1:7470".parse().unwrap();
        assert_eq!(worker_address(base, 0), Some(base));
        assert_eq!(
            worker_address(base, 2),
            Some("10.0.0.1:7472".parse().unwrap())
        );
        assert_eq!(worker_address("10.0.0.1:65535".parse().unwrap(), 1), None);
    }
}
