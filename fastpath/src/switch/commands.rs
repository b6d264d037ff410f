//! The worker's answers to its commands: ports and links added and removed, impairments
//! and captures set, stats read, and what the peer transport is told.

use std::sync::Arc;
use std::time::Instant;

use xwire_proto::WireId;

use crate::counters::{Direction, LinkCounters};
use crate::link_table::PortId;
use crate::remote_transport::RemoteTransport;
use crate::worker::{Command, Join, PeerCommand, WorkerConfig, WorkerError};

use super::extras::LinkExtras;
use super::open::WaitingPort;
use super::Switch;

impl Switch {
    pub(super) fn apply(&mut self, command: Command, config: &WorkerConfig) {
        match command {
            Command::AddPort {
                ifname,
                max_frame,
                choice,
                join,
                reply,
            } => {
                let waiting = WaitingPort {
                    ifname,
                    max_frame,
                    choice: choice.unwrap_or(config.ports),
                    join,
                    reply,
                };
                self.try_add_port(waiting, config);
            }
            Command::RemovePorts { ids, reply } => {
                self.remove_ports(ids, reply);
            }
            Command::SteerPair {
                wire,
                ends,
                max_frame,
                reply,
            } => {
                self.steer_pair(wire, ends, max_frame, reply, config);
            }
            Command::AddLink { wire, a, b, reply } => {
                let missing = [a, b].into_iter().find(|&p| self.port(p).is_none());
                let result = match missing {
                    Some(port) => Err(WorkerError::NoSuchPort(port)),
                    None => self.table.add_link(wire, a, b).map_err(WorkerError::from),
                };
                let _ = reply.send(result);
            }
            Command::RemoveLink { wire, reply } => {
                if let Some(link) = self.table.link_index(wire) {
                    self.extras.forget(link);
                }
                let _ = reply.send(self.table.remove_link(wire));
            }
            Command::SetImpairment {
                wire,
                from,
                spec,
                reply,
            } => {
                let result = self.on_direction(wire, from, |extras, link, direction| {
                    extras.set_impairment(link, wire, direction, spec)
                });
                let _ = reply.send(result);
            }
            Command::Capture {
                wire,
                from,
                tap,
                reply,
            } => {
                let result = self.on_direction(wire, from, |extras, link, direction| {
                    extras.set_tap(link, tap, direction)
                });
                let _ = reply.send(result);
            }
            Command::HeldFrames { wire, from, reply } => {
                let result = self.on_direction(wire, from, |extras, link, direction| {
                    extras.held(link, direction)
                });
                let _ = reply.send(result);
            }
            Command::Peer(command) => self.apply_to_peers(command),
            Command::KernelDrops { id, reply } => {
                let _ = reply.send(self.kernel_drops(id));
            }
            Command::Stats { reply } => {
                let _ = reply.send(self.stats());
            }
            Command::Stop => {}
        }
    }

    fn apply_to_peers(&mut self, command: PeerCommand) {
        match command {
            PeerCommand::AttachPeers { bind, reply } => {
                let result = bind().map_err(WorkerError::from).and_then(|t| {
                    let addr = t.local_addr();
                    self.attach_peers(t).map_err(|e| {
                        WorkerError::Start(format!("watch the peer transport's socket: {e}"))
                    })?;
                    Ok(addr)
                });
                let _ = reply.send(result);
            }
            PeerCommand::AddPeer {
                name,
                addr,
                carrier,
                reply,
            } => {
                let result = self.with_peers(|peers| {
                    (peers.add_peer(&name, addr, carrier, Instant::now()))
                        .map_err(WorkerError::from)
                });
                let _ = reply.send(result);
            }
            PeerCommand::RetirePeer { peer, reply } => {
                let result = self.with_peers(|peers| Ok(peers.retire_peer(peer, Instant::now())));
                let _ = reply.send(result);
            }
            PeerCommand::AddRemoteLink {
                wire,
                port,
                peer,
                carrier,
                reply,
            } => {
                let join = Join {
                    wire,
                    peer,
                    carrier,
                };
                let _ = reply.send(self.join_remote(port, join));
            }
            PeerCommand::PeerStatus { reply } => {
                let _ = reply.send(self.peer_status().ok_or(WorkerError::NoPeers));
            }
            PeerCommand::SendControl {
                peer,
                message,
                reply,
            } => {
                let result =
                    self.with_peers(|peers| Ok(peers.send_control(Instant::now(), peer, &message)));
                let _ = reply.send(result);
            }
        }
    }

    /// What `f` does with the direction of `wire`'s link that frames from port `from`
    /// take (the link's index and the direction); an error if there is none.
    fn on_direction<T>(
        &mut self,
        wire: WireId,
        from: PortId,
        f: impl FnOnce(&mut LinkExtras, usize, Direction) -> T,
    ) -> Result<T, WorkerError> {
        let (link, direction) =
            (self.table.direction_from(wire, from)).ok_or(WorkerError::NoSuchLink(wire, from))?;
        Ok(f(&mut self.extras, link, direction))
    }

    /// What `f` does with the peer transport; an error if the worker has no peers.
    fn with_peers<T>(
        &mut self,
        f: impl FnOnce(&mut (dyn RemoteTransport + 'static)) -> Result<T, WorkerError>,
    ) -> Result<T, WorkerError> {
        f(self.peers_mut().ok_or(WorkerError::NoPeers)?)
    }

    pub(super) fn join_remote(
        &mut self,
        port: PortId,
        Join {
            wire,
            peer,
            carrier,
        }: Join,
    ) -> Result<Arc<LinkCounters>, WorkerError> {
        match self.port(port) {
            None => Err(WorkerError::NoSuchPort(port)),
            Some(_) if self.peers.is_none() => Err(WorkerError::NoPeers),
            Some(_) => self
                .table
                .add_remote_link(wire, port, peer, carrier)
                .map_err(WorkerError::from),
        }
    }
}
