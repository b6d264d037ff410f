//! The peer desk: a thread of its own that takes what peers say from the fast path and
//! passes the node's thread only what may change a wire. Claims are judged first here,
//! against a `ClaimView` the node keeps up to date; those refused are counted, logged in
//! summaries and answered here, so that a peer's flood of bad claims (an attack run sent
//! millions) costs the node's thread nothing, and the local API it answers never waits
//! behind them (issue 37, item 2).
//!
//! The two threads share no lock: the node sends view changes on one channel (never
//! full: the node does not wait on the desk), and the desk sends news on another,
//! bounded one. When that is full the desk waits, and takes no more events meanwhile:
//! they wait in the fast path, which bounds what a peer can make it hold.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use xwire_fastpath::peer::{ControlMessage, PeerEvent, PeerId};
use xwire_fastpath::{PeerControl, WorkerError};
use xwire_proto::control::{ControlBody, SyncBody, WireKey, WireSpec};

use super::claims::{judge, ClaimView, ViewChange};
use super::refusals::RefusalBook;
use crate::metrics::NodeMetrics;

/// What the desk passes the node.
#[derive(Debug)]
pub(super) enum PeerNews {
    /// Peer `name`'s control connection is up: the node sends it its Sync.
    Up { name: String },
    /// Claims by `from` that the view allows. `sync`: they are a part of `from`'s Sync,
    /// and whether more parts follow (the last part, maybe empty, ends the Sync).
    Claims {
        from: String,
        specs: Vec<WireSpec>,
        sync: Option<bool>,
    },
    /// `from` let go of the far end of `key`, which it held.
    Gone { from: String, key: WireKey },
}

/// News the node has not taken yet, at most.
const NEWS_WAITING: usize = 64;
/// How often the desk takes the fast path's events while peers are talking (there were
/// events in the last `QUIET_AFTER`). The node takes the desk's news after each request
/// and between them, so news that waits long here arrives in bursts, and the passes that
/// join a burst's wires run while CNI calls wait. `xwire-perf cni-scale`, 200 pods,
/// against the node reading the events itself: at 20 ms, one caller's ADDs waited 1.4 to
/// 2.2 ms in the queue against 0.6 (ADD p99 16 to 19 ms against 12); at 2 ms the queue
/// was as before, but eight callers' ADD p99 grew by a third (each look wakes every
/// worker); at 5 ms the queue is as before and eight callers' figures too.
const LOOK_EVERY: Duration = Duration::from_millis(5);
/// How often it takes them once peers have been quiet for `QUIET_AFTER`: each look wakes
/// every worker.
const LOOK_EVERY_QUIET: Duration = Duration::from_millis(20);
const QUIET_AFTER: Duration = Duration::from_secs(1);
/// The most claims of a Sync passed as one piece of news: the node works through a Sync
/// of tens of thousands over several of its turns.
const SPECS_PER_NEWS: usize = 2048;

/// The node's end of the desk; dropping it stops the desk's thread.
pub(super) struct PeerDesk {
    changes: Option<Sender<ViewChange>>,
    news: Option<Receiver<PeerNews>>,
    thread: Option<JoinHandle<()>>,
}

impl PeerDesk {
    /// Starts the desk on every worker's peer events (index: the worker; worker 0's
    /// connection carries the control protocol), judging by `view`, and taking the far
    /// ends in `held` as held by the peer named (the node's records at start).
    pub(super) fn start(
        controls: Vec<PeerControl>,
        view: ViewChange,
        held: HashMap<WireKey, String>,
        refused: Arc<AtomicU64>,
        metrics: Arc<NodeMetrics>,
    ) -> std::io::Result<PeerDesk> {
        let (changes, changes_in) = crossbeam_channel::unbounded();
        let (news_out, news) = crossbeam_channel::bounded(NEWS_WAITING);
        let mut desk = Desk {
            controls,
            view: ClaimView::default(),
            names: HashMap::new(),
            held,
            book: RefusalBook::new(refused, metrics),
            news: news_out,
            changes: changes_in,
        };
        desk.view.apply(view);
        let thread = std::thread::Builder::new()
            .name("xwire-peer-desk".into())
            .spawn(move || desk.run())?;
        Ok(PeerDesk {
            changes: Some(changes),
            news: Some(news),
            thread: Some(thread),
        })
    }

    /// Tells the desk's view a change.
    pub(super) fn tell(&self, change: ViewChange) {
        if let Some(changes) = &self.changes {
            // A desk that has stopped (its workers did) judges nothing any more.
            let _ = changes.send(change);
        }
    }

    /// The next news, if any waits.
    pub(super) fn next(&self) -> Option<PeerNews> {
        self.news.as_ref()?.try_recv().ok()
    }

    /// Whether news waits.
    pub(super) fn has_news(&self) -> bool {
        self.news.as_ref().is_some_and(|n| !n.is_empty())
    }
}

impl Drop for PeerDesk {
    fn drop(&mut self) {
        // Both channels closed: the desk stops at its next look, or at once if it was
        // waiting to pass news.
        self.changes = None;
        self.news = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The desk's thread's state.
struct Desk {
    controls: Vec<PeerControl>,
    view: ClaimView,
    /// Peer names by worker and id, as each connection's Up said.
    names: HashMap<(usize, PeerId), String>,
    /// Far ends a peer holds as far as the desk knows (the node's records at start, and
    /// the claims passed since, by the wire): a DelWire for any other is no news. Bounded
    /// by the view's links, as only claims the view allows are added.
    held: HashMap<WireKey, String>,
    book: RefusalBook,
    news: Sender<PeerNews>,
    changes: Receiver<ViewChange>,
}

/// Why the desk stops: the node or the workers are gone.
struct Stop;

impl Desk {
    fn run(mut self) {
        let _ = self.run_until_stopped();
    }

    fn run_until_stopped(&mut self) -> Result<(), Stop> {
        let mut last_events = Instant::now();
        loop {
            let mut any = false;
            for index in 0..self.controls.len() {
                let events = match self.controls[index].take_events() {
                    Ok(events) => events,
                    Err(WorkerError::Stopped) => return Err(Stop),
                    Err(e) => {
                        tracing::error!(worker = index, "reading peer events: {e}");
                        Vec::new()
                    }
                };
                // The changes the node sent before these events were taken are applied
                // first: a peer's answer to what the node announced after a change is
                // judged by the view with that change in it.
                self.apply_changes()?;
                any |= !events.is_empty();
                for event in events {
                    self.on_event(index, event)?;
                }
            }
            self.book.log_due(Instant::now());
            if any {
                last_events = Instant::now();
            }
            let wait = if last_events.elapsed() < QUIET_AFTER {
                LOOK_EVERY
            } else {
                LOOK_EVERY_QUIET
            };
            match self.changes.recv_timeout(wait) {
                Ok(change) => self.view.apply(change),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(Stop),
            }
        }
    }

    fn apply_changes(&mut self) -> Result<(), Stop> {
        loop {
            match self.changes.try_recv() {
                Ok(change) => self.view.apply(change),
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(Stop),
            }
        }
    }

    fn pass(&self, news: PeerNews) -> Result<(), Stop> {
        self.news.send(news).map_err(|_| Stop)
    }

    fn on_event(&mut self, worker: usize, event: PeerEvent) -> Result<(), Stop> {
        let name = |desk: &Desk, peer| desk.names.get(&(worker, peer)).cloned();
        // Worker 0's connection to a peer carries the control protocol; the other
        // workers' carry frames only, and their comings and goings change nothing.
        if worker > 0 {
            match event {
                PeerEvent::Up { peer, name, .. } => {
                    tracing::info!(peer = %name, worker, "peer up (frames only)");
                    self.names.insert((worker, peer), name);
                }
                PeerEvent::Down { peer, reason } => {
                    let peer = name(self, peer);
                    tracing::info!(?peer, worker, %reason, "peer down (frames only)")
                }
                PeerEvent::Refused { remote, reason } => {
                    tracing::warn!(%remote, worker, %reason, "peer refused")
                }
                PeerEvent::Control { peer, .. } => tracing::warn!(
                    peer = ?name(self, peer),
                    worker,
                    "control message on a connection that carries frames only: ignored"
                ),
            }
            return Ok(());
        }
        match event {
            PeerEvent::Up {
                peer,
                name,
                version,
            } => {
                tracing::info!(peer = %name, version, "peer up");
                self.names.insert((0, peer), name.clone());
                self.pass(PeerNews::Up { name })
            }
            PeerEvent::Down { peer, reason } => {
                tracing::info!(peer = ?name(self, peer), %reason, "peer down");
                Ok(())
            }
            PeerEvent::Refused { remote, reason } => {
                tracing::warn!(%remote, %reason, "peer refused");
                Ok(())
            }
            PeerEvent::Control { peer, message } => {
                // A message comes after its connection's Up: a name is always known.
                let Some(from) = name(self, peer) else {
                    tracing::debug!(?peer, "control message from a peer not up: ignored");
                    return Ok(());
                };
                self.on_control(peer, from, message)
            }
        }
    }

    fn on_control(
        &mut self,
        peer: PeerId,
        from: String,
        message: ControlMessage,
    ) -> Result<(), Stop> {
        match message.body {
            ControlBody::AddWire(spec) => {
                if self.allows(peer, &from, &spec) {
                    self.pass(PeerNews::Claims {
                        from,
                        specs: vec![spec],
                        sync: None,
                    })?;
                }
                Ok(())
            }
            ControlBody::DelWire(key) => {
                if self.held.get(&key) == Some(&from) {
                    self.held.remove(&key);
                    self.pass(PeerNews::Gone { from, key })?;
                }
                Ok(())
            }
            ControlBody::Sync(sync) => self.on_sync(peer, from, sync),
            ControlBody::Error(e) => {
                tracing::warn!(peer = %from, code = e.code.0, "peer error: {}", e.message);
                Ok(())
            }
            ControlBody::Hello(_) | ControlBody::Ack => Ok(()),
        }
    }

    /// A Sync, or a part of one: its claims the view allows are passed in pieces of at
    /// most `SPECS_PER_NEWS`, and its last piece always (it ends the Sync, and says
    /// which far ends the peer no longer holds).
    fn on_sync(&mut self, peer: PeerId, from: String, sync: SyncBody) -> Result<(), Stop> {
        let mut allowed = Vec::new();
        for spec in sync.wires {
            if self.allows(peer, &from, &spec) {
                allowed.push(spec);
                if allowed.len() == SPECS_PER_NEWS {
                    self.pass(PeerNews::Claims {
                        from: from.clone(),
                        specs: std::mem::take(&mut allowed),
                        sync: Some(true),
                    })?;
                }
            }
        }
        if allowed.is_empty() && sync.more {
            return Ok(());
        }
        self.pass(PeerNews::Claims {
            from,
            specs: allowed,
            sync: Some(sync.more),
        })
    }

    /// Whether the view allows `from`'s claim; a claim it does not allow is refused here.
    fn allows(&mut self, peer: PeerId, from: &str, spec: &WireSpec) -> bool {
        match judge(&self.view, from, spec) {
            Ok(()) => {
                self.held.insert(spec.key.clone(), from.to_owned());
                true
            }
            Err(refusal) => {
                if self.book.refuse(from, &refusal, spec, Instant::now()) {
                    // See `Node::on_add_wire`: the claimant stops waiting on this node.
                    let answer = ControlMessage {
                        request_id: 0,
                        body: ControlBody::DelWire(spec.key.clone()),
                    };
                    if let Err(e) = self.controls[0].send_control(peer, answer) {
                        tracing::warn!(peer = %from, "answering a refused claim: {e}");
                    }
                }
                false
            }
        }
    }
}
