//! A worker stops when its `Worker` is dropped, whatever handles on it are left: a
//! handle's call made while it stops is answered `Stopped`, never left waiting. (The
//! daemon's peer desk asks its workers for peer events every few milliseconds; a request
//! queued just as a worker took its stop was never answered, and the daemon hung on
//! SIGTERM until it was killed.)

use std::sync::mpsc;
use std::time::Duration;

use xwire_fastpath::{Worker, WorkerConfig, WorkerError};

/// How many stops to try: each races a handle's busy loop against the stop.
const ROUNDS: usize = 200;

#[test]
fn a_handle_asking_as_its_worker_stops_is_told_stopped() {
    for round in 0..ROUNDS {
        let worker = Worker::spawn(WorkerConfig::default()).unwrap();
        let control = worker.peer_control().unwrap();
        let (done, ended) = mpsc::channel();
        let (asking, started) = mpsc::channel();
        let asker = std::thread::spawn(move || {
            let mut calls = 0u64;
            loop {
                calls += 1;
                if calls == 1 {
                    asking.send(()).unwrap();
                }
                // No peers attached: every answer is NoPeers until the worker stops.
                match control.take_events() {
                    Err(WorkerError::Stopped) => break,
                    Err(WorkerError::NoPeers) => {}
                    other => panic!("round {round}: {other:?}"),
                }
            }
            done.send(calls).unwrap();
        });
        started.recv().unwrap();
        drop(worker);
        let answered = ended.recv_timeout(Duration::from_secs(10));
        assert!(
            answered.is_ok(),
            "round {round}: a call made as the worker stopped was never answered"
        );
        asker.join().unwrap();
    }
}
