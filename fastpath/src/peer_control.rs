//! A worker's peers as another thread than the `Worker`'s holder sees them: it takes the
//! peers' events and sends them control messages. The control plane reads what peers say
//! on a thread of its own, so that a peer's messages neither wait behind the local API
//! nor hold it up (issue 37). The worker stops when its `Worker` is dropped, whatever
//! handles are left: their calls then fail with `WorkerError::Stopped`.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::peer::{ControlMessage, PeerEvent, PeerId};
use crate::worker::{Command, PeerCommand, Worker, WorkerError};

pub struct PeerControl {
    commands: Sender<Command>,
    wake: UnixDatagram,
    stopped: Arc<AtomicBool>,
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
            stopped: Arc::clone(&self.stopped),
        })
    }
}

impl PeerControl {
    /// The peer events since the last call (this handle's or the `Worker`'s
    /// `peer_status`: one reader of the events is meant).
    pub fn take_events(&self) -> Result<Vec<PeerEvent>, WorkerError> {
        let (_, events) = ask((&self.commands, &self.wake, &self.stopped), |reply| {
            Command::Peer(PeerCommand::PeerStatus { reply })
        })??;
        Ok(events)
    }

    /// As `Worker::send_control`.
    pub fn send_control(&self, peer: PeerId, message: ControlMessage) -> Result<bool, WorkerError> {
        ask((&self.commands, &self.wake, &self.stopped), |reply| {
            Command::Peer(PeerCommand::SendControl {
                peer,
                message: Box::new(message),
                reply,
            })
        })?
    }
}

/// Sends the worker `command` and waits for its answer (the `Worker`'s calls and its
/// handles' alike). A command queued as the worker stopped is never taken: the worker
/// drops what is queued once it has said it stopped (`drop_queued`), and a command sent
/// after that finds it said so here, so no caller waits for an answer that cannot come.
pub(crate) fn ask<T>(
    (commands, wake, stopped): (&Sender<Command>, &UnixDatagram, &AtomicBool),
    command: impl FnOnce(Sender<T>) -> Command,
) -> Result<T, WorkerError> {
    let (reply, answer) = bounded(1);
    commands
        .send(command(reply))
        .map_err(|_| WorkerError::Stopped)?;
    // A full socket means wake-ups are already waiting: nothing is lost.
    let _ = wake.send(&[1]);
    wait_for(&answer, stopped)
}

/// The answer to a command already sent, or `Stopped` if it cannot come.
pub(crate) fn wait_for<T>(answer: &Receiver<T>, stopped: &AtomicBool) -> Result<T, WorkerError> {
    // Pairs with the fence in `drop_queued`: either the worker's drain sees the command
    // (and drops its reply), or this sees that the worker stopped.
    fence(Ordering::SeqCst);
    if stopped.load(Ordering::SeqCst) {
        return answer.try_recv().map_err(|_| WorkerError::Stopped);
    }
    answer.recv().map_err(|_| WorkerError::Stopped)
}

/// Run by the worker's thread after its last pass: says it stopped, then drops every
/// command still queued, and with each the sender its caller waits on (a channel keeps
/// what is queued while any sender lives, and handles hold senders).
pub(crate) fn drop_queued(stopped: &AtomicBool, inbox: &Receiver<Command>) {
    stopped.store(true, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    while inbox.try_recv().is_ok() {}
}
