//! The worker's answer to `Command::Stats` (see `crate::stats`).

use crate::counters::Direction;
use crate::link_table::PortId;
use crate::stats::{LinkStats, WorkerStats};
use crate::worker::WorkerError;
use crate::xdp_port::KernelDrops;

use super::{Port, Switch};

impl Switch {
    pub(super) fn stats(&mut self) -> WorkerStats {
        let mut links: Vec<LinkStats> = self
            .table
            .links()
            .map(|(wire, a, b, counters)| LinkStats {
                wire,
                a,
                b,
                a_to_b: counters.snapshot(Direction::AToB),
                b_to_a: counters.snapshot(Direction::BToA),
                kernel_drops: [None, None],
            })
            .collect();
        // Reading a port's statistics needs the switch mutably: after the table's borrow.
        for link in &mut links {
            link.kernel_drops = [
                self.kernel_drops(link.a).ok(),
                link.b.and_then(|b| self.kernel_drops(b).ok()),
            ];
        }
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
