//! A worker's peers as another thread than the `Worker`'s holder sees them: it takes the
//! peers' events and sends them control messages. The control plane reads what peers say
//! on a thread of its own, so that a peer's messages neither wait behind the local API
//! nor hold it up (issue 37). The worker stops when its `Worker` is dropped, whatever
//! handles are left: their calls then fail with `WorkerError::Stopped`.

use std::os::unix::net::UnixDatagram;

use crossbeam_channel::{bounded, Sender};

use crate::peer::{ControlMessage, PeerEvent, PeerId};
use crate::worker::{Command, PeerCommand, Worker, WorkerError};

pub struct PeerControl {
    commands: Sender<Command>,
    wake: UnixDatagram,
}

impl Worker {
    /// A handle on this worker's peers for another thread.
    pub fn peer_control(&self) -> Result<PeerControl, WorkerError> {
        let wake = self
            .wake
            .try_clone()
            .map_err(|e| WorkerError::Start(format!("a second wake-up socket: {e}")))?;
        Ok(PeerControl {
            commands: self.commands.clone(),
            wake,
        })
    }
}

impl PeerControl {
    /// The peer events since the last call (this handle's or the `Worker`'s
    /// `peer_status`: one reader of the events is meant).
    pub fn take_events(&self) -> Result<Vec<PeerEvent>, WorkerError> {
        let (_, events) = ask(&self.commands, &self.wake, |reply| {
            Command::Peer(PeerCommand::PeerStatus { reply })
        })??;
        Ok(events)
    }

    /// As `Worker::send_control`.
    pub fn send_control(&self, peer: PeerId, message: ControlMessage) -> Result<bool, WorkerError> {
        ask(&self.commands, &self.wake, |reply| {
            Command::Peer(PeerCommand::SendControl {
                peer,
                message: Box::new(message),
                reply,
            })
        })?
    }
}

/// Sends the worker `command` and waits for its answer (the `Worker`'s calls and its
/// handles' alike).
pub(crate) fn ask<T>(
    commands: &Sender<Command>,
    wake: &UnixDatagram,
    command: impl FnOnce(Sender<T>) -> Command,
) -> Result<T, WorkerError> {
    let (reply, answer) = bounded(1);
    commands
        .send(command(reply))
        .map_err(|_| WorkerError::Stopped)?;
    // A full socket means wake-ups are already waiting: nothing is lost.
    let _ = wake.send(&[1]);
    answer.recv().map_err(|_| WorkerError::Stopped)
}
