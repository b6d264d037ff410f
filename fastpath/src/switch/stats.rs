//! The worker's answer to `Command::Stats` (see `crate::stats`).

use crate::counters::Direction;
use crate::link_table::PortId;
use crate::stats::{LinkStats, WorkerStats};
use crate::worker::WorkerError;
use crate::xdp_port::KernelDrops;

use super::{Port, Switch};

impl Switch {
    pub(super) fn stats(&mut self) -> WorkerStats {
        let ends: Vec<_> = self
            .table
            .links()
            .map(|(wire, a, b, counters)| {
                (
                    wire,
                    a,
                    b,
                    counters.snapshot(Direction::AToB),
                    counters.snapshot(Direction::BToA),
                )
            })
            .collect();
        let links = ends
            .into_iter()
            .map(|(wire, a, b, a_to_b, b_to_a)| LinkStats {
                wire,
                a,
                b,
                a_to_b,
                b_to_a,
                kernel_drops: [
                    self.kernel_drops(a).ok(),
                    b.and_then(|b| self.kernel_drops(b).ok()),
                ],
            })
            .collect();
        let (transport, peers) = match self.peers.as_mut() {
            Some(peers) => (Some(peers.counters()), peers.endpoint_mut().peer_stats()),
            None => (None, Vec::new()),
        };
        WorkerStats {
            links,
            transport,
            peers,
            busy: self.busy,
            running: self.started.elapsed(),
        }
    }

    /// What the kernel dropped at port `id` before the worker saw it.
    pub(super) fn kernel_drops(&mut self, id: PortId) -> Result<KernelDrops, WorkerError> {
        let port = self
            .slots
            .get_mut(usize::from(id.0))
            .and_then(Option::as_mut)
            .map(|slot| &mut slot.port)
            .ok_or(WorkerError::NoSuchPort(id))?;
        match port {
            Port::Xdp(port) => port.kernel_drops(),
            Port::Packet(port) => port.kernel_drops(),
            Port::Steered(port) => port.kernel_drops(),
        }
        .map_err(WorkerError::Statistics)
    }
}
