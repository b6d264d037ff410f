//! The worker's answer to `Command::Stats` (see `crate::stats`).

use crate::counters::Direction;
use crate::link_table::PortId;
use crate::stats::{LinkStats, WorkerStats};
use crate::worker::WorkerError;
use crate::xdp_port::KernelDrops;

use super::Switch;

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
                umem_frames: [None, None],
            })
            .collect();
        // Reading a port's statistics needs the switch mutably: after the table's borrow.
        for link in &mut links {
            link.kernel_drops = [
                self.kernel_drops(link.a).ok(),
                link.b.and_then(|b| self.kernel_drops(b).ok()),
            ];
            let frames = |id: PortId| {
                self.slots
                    .get(usize::from(id.0))
                    .and_then(Option::as_ref)
                    .and_then(|slot| slot.umem_frames())
            };
            link.umem_frames = [frames(link.a), link.b.and_then(frames)];
        }
        let (transport, peers) = match self.peers.as_mut() {
            Some(peers) => (Some(peers.counters()), peers.peer_stats()),
            None => (None, Vec::new()),
        };
        WorkerStats {
            links,
            transport,
            peers,
            busy: self.busy,
            running: self.started.elapsed(),
            away: self.away,
            // Stats are taken on the worker's own thread.
            nice: crate::nice::get(),
        }
    }

    /// What the kernel dropped at port `id` before the worker saw it, over the port's
    /// whole life (a resize's sockets included).
    pub(super) fn kernel_drops(&mut self, id: PortId) -> Result<KernelDrops, WorkerError> {
        if self.port(id).is_none() {
            return Err(WorkerError::NoSuchPort(id));
        }
        self.lifetime_drops(usize::from(id.0))
            .map_err(WorkerError::Statistics)
    }
}
