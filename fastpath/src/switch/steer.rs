//! Veth pairs steered through the switch in place (`steered_port` says how), and ports
//! closed together so that nothing in flight between them is lost.

use std::time::{Duration, Instant};

use xwire_proto::WireId;

use crate::link_table::PortId;
use crate::steered_port::{SteeredEnd, SteeredPort};
use crate::worker::{PortInfo, PortKind, SteeredPair, WorkerConfig, WorkerError};
use crate::xdp_port::{PortError, XdpMode};

use super::{Port, Slot, Switch, REBIND_PAUSE, RELEASE_GRACE};

/// The longest `remove_ports` passes to forward what was in flight: frames in the
/// receiving rings when the programs went, and frames queued to send.
const DRAIN_LIMIT: Duration = Duration::from_millis(50);

/// The UMEM frames of each socket of a steered pair, at most.
const STEERED_FRAMES: usize = 1024;

impl Switch {
    /// Steers the veth pair whose two ends are `ends` through the switch as `wire`: opens
    /// a port for each pod (on the other pod's interface), links them, then attaches the
    /// steering programs. Returns the ports, the first standing for the pod of `ends[0]`.
    pub(super) fn steer_pair(
        &mut self,
        wire: WireId,
        ends: [SteeredEnd; 2],
        max_frame: usize,
        config: &WorkerConfig,
    ) -> Result<SteeredPair, WorkerError> {
        let mut opened = Vec::with_capacity(2);
        // Pod a's port is on b's interface, and b's on a's.
        for far in [&ends[1], &ends[0]] {
            match self.add_steered_port(far, max_frame, config) {
                Ok(info) => opened.push(info),
                Err(e) => {
                    self.close_all(&opened);
                    return Err(e);
                }
            }
        }
        let ids = [opened[0].id, opened[1].id];
        let counters = match self.table.add_link(wire, ids[0], ids[1]) {
            Ok(counters) => counters,
            Err(e) => {
                self.close_all(&opened);
                return Err(e.into());
            }
        };
        for id in ids {
            let (Some(Port::Steered(port)), Some(program)) = (
                self.slots[usize::from(id.0)].as_mut().map(|s| &mut s.port),
                &self.redirect,
            ) else {
                unreachable!("a steered port was just opened in this slot");
            };
            if let Err(e) = port.steer(program) {
                self.table.remove_link(wire);
                self.close_all(&opened);
                return Err(e.into());
            }
        }
        let ports = <[PortInfo; 2]>::try_from(opened).expect("two ports");
        Ok(SteeredPair { ports, counters })
    }

    fn add_steered_port(
        &mut self,
        far: &SteeredEnd,
        max_frame: usize,
        config: &WorkerConfig,
    ) -> Result<PortInfo, WorkerError> {
        let index = self.free_slot(config)?;
        let Some(program) = &self.redirect else {
            return Err(PortError::Unsteerable {
                ifname: far.ifname.clone(),
                reason: "the worker's XDP program did not load".into(),
            }
            .into());
        };
        // Not resized (a bridge would let its frames bypass the switch, impairments and
        // all): a steered pair is a same-node wire that asked for impairment or capture,
        // and there are few of them.
        let frames = config.frames_per_port.min(STEERED_FRAMES);
        // A pair steered a moment ago: the kernel may still hold the sockets' queues.
        let since = Instant::now();
        let port = loop {
            match SteeredPort::open(program, index as u32, far, max_frame, frames) {
                Err(PortError::Busy(_)) if since.elapsed() < RELEASE_GRACE => {
                    std::thread::sleep(REBIND_PAUSE);
                }
                result => break result?,
            }
        };
        let ifname = far.ifname.as_str();
        let slot = Slot::new(Port::Steered(Box::new(port)), config.batch);
        self.install(index, slot, ifname, max_frame)?;
        Ok(PortInfo {
            id: PortId(index as u16),
            ifname: ifname.into(),
            kind: PortKind::AfXdp(XdpMode::Native),
        })
    }

    fn close_all(&mut self, ports: &[PortInfo]) {
        for port in ports {
            let _ = self.remove_port(port.id);
        }
    }

    /// Closes ports together: steered ones stop steering first, then the worker passes
    /// until what was in flight through them has gone on (for at most `DRAIN_LIMIT`), then
    /// all close. A steered pair closed this way loses no frame.
    pub(super) fn remove_ports(
        &mut self,
        ids: &[PortId],
        config: &WorkerConfig,
    ) -> Result<(), WorkerError> {
        if let Some(&missing) = ids.iter().find(|&&id| self.port(id).is_none()) {
            return Err(WorkerError::NoSuchPort(missing));
        }
        let mut steered = false;
        for &id in ids {
            if let Some(Port::Steered(port)) =
                self.slots[usize::from(id.0)].as_mut().map(|s| &mut s.port)
            {
                port.unsteer();
                steered = true;
            }
        }
        if steered {
            let since = Instant::now();
            while since.elapsed() < DRAIN_LIMIT {
                let pass = self.poll_once(config, false);
                if pass.moved == 0 && !self.sending(ids) {
                    break;
                }
            }
        }
        for &id in ids {
            self.remove_port(id)?;
        }
        Ok(())
    }

    /// Whether any of `ids` has frames waiting to be sent or in its TX ring.
    fn sending(&self, ids: &[PortId]) -> bool {
        ids.iter().any(|id| {
            self.slots[usize::from(id.0)]
                .as_ref()
                .is_some_and(|slot| match &slot.port {
                    Port::Steered(port) => !slot.pending.is_empty() || port.sending() > 0,
                    Port::Xdp(port) => !slot.pending.is_empty() || port.in_flight() > 0,
                    Port::Packet(_) => false,
                })
        })
    }
}
