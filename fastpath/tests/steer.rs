//! A veth pair straight between two pod namespaces, steered through the switch in place:
//! its frames take the link's impairments while steered, the pair is plain again after,
//! and moving on and off the switch path loses no frame.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use xwire_fastpath::impairment::ImpairmentSpec;
use xwire_fastpath::{PortInfo, SteeredEnd, Worker, WorkerConfig};
use xwire_proto::WireId;
use xwire_testbed::checks::ping_rtts;
use xwire_testbed::{Flow, Netns, Veth};

const WIRE: WireId = WireId(7);

struct Pair {
    pod_a: Netns,
    pod_b: Netns,
    node: Netns,
}

impl Pair {
    fn new(label: &str) -> Pair {
        Pair {
            pod_a: Netns::new(&format!("{label}-a")).unwrap(),
            pod_b: Netns::new(&format!("{label}-b")).unwrap(),
            node: Netns::new(&format!("{label}-node")).unwrap(),
        }
    }

    /// The veth straight between the pods, up and addressed, with checksums computed by
    /// the senders (a frame that leaves through the switch carries what it was sent with).
    fn veth(&self) -> Veth<'_> {
        let veth = Veth::named(&self.pod_a, "eth1", &self.pod_b, "eth1").unwrap();
        veth.set_up().unwrap();
        for pod in [&self.pod_a, &self.pod_b] {
            pod.set_tx_checksum("eth1", false).unwrap();
        }
        self.pod_a.add_address("eth1", "192.0.2.1/30").unwrap();
        self.pod_b.add_address("eth1", "192.0.2.2/30").unwrap();
        veth
    }

    fn worker(&self) -> Worker {
        self.node
            .run(|| Worker::spawn(WorkerConfig::default()))
            .unwrap()
            .unwrap()
    }

    fn ends(&self) -> [SteeredEnd; 2] {
        let end = |pod: &Netns| SteeredEnd {
            netns: OwnedFd::from(File::open(pod.path()).unwrap()),
            ifname: "eth1".into(),
        };
        [end(&self.pod_a), end(&self.pod_b)]
    }
}

fn delay(ms: u64) -> Option<ImpairmentSpec> {
    Some(ImpairmentSpec {
        delay: Duration::from_millis(ms),
        ..ImpairmentSpec::default()
    })
}

/// Clears both directions' impairments, waits until nothing is held, and closes the two
/// ports: the way back to a plain pair that loses nothing.
fn unsteer(worker: &Worker, ports: &[PortInfo; 2]) {
    for port in ports {
        worker.set_impairment(WIRE, port.id, None).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while ports
        .iter()
        .any(|p| worker.held_frames(WIRE, p.id).unwrap() > 0)
    {
        assert!(Instant::now() < deadline, "held frames were not released");
        std::thread::sleep(Duration::from_millis(1));
    }
    worker.remove_ports(&[ports[0].id, ports[1].id]).unwrap();
}

#[test]
fn a_steered_pair_takes_the_links_delay_and_is_plain_again_after() {
    let pair = Pair::new("xst-delay");
    let _veth = pair.veth();
    let worker = pair.worker();
    assert_eq!(ping_rtts(&pair.pod_a, "192.0.2.2", 2).unwrap().len(), 2);

    let ports = worker.steer_pair(WIRE, pair.ends(), 1514).unwrap().ports;
    worker.set_impairment(WIRE, ports[0].id, delay(20)).unwrap();
    worker.set_impairment(WIRE, ports[1].id, delay(10)).unwrap();
    let rtts = ping_rtts(&pair.pod_a, "192.0.2.2", 4).unwrap();
    assert_eq!(rtts.len(), 4, "{rtts:?}");
    assert!(rtts.iter().all(|&ms| ms >= 30.0), "{rtts:?}");
    let counters = worker.add_link(WIRE, ports[0].id, ports[1].id);
    assert!(counters.is_err(), "the pair's link is there already");

    unsteer(&worker, &ports);
    let rtts = ping_rtts(&pair.pod_a, "192.0.2.2", 4).unwrap();
    assert_eq!(rtts.len(), 4, "{rtts:?}");
    assert!(rtts.iter().all(|&ms| ms < 10.0), "{rtts:?}");
    // The same pair steers again at once (the kernel may still be releasing its queues).
    let ports = worker.steer_pair(WIRE, pair.ends(), 1514).unwrap().ports;
    worker.set_impairment(WIRE, ports[1].id, delay(15)).unwrap();
    let rtts = ping_rtts(&pair.pod_b, "192.0.2.1", 2).unwrap();
    assert!(rtts.iter().all(|&ms| ms >= 15.0), "{rtts:?}");
    unsteer(&worker, &ports);
}

#[test]
fn moving_on_and_off_the_switch_path_loses_no_frame() {
    let pair = Pair::new("xst-moves");
    let _veth = pair.veth();
    let worker = pair.worker();
    let every = Duration::from_micros(500);
    let a_to_b = Flow::start(
        "a-b",
        (&pair.pod_a, "eth1"),
        (&pair.pod_b, "eth1"),
        0xa,
        every,
    )
    .unwrap();
    let b_to_a = Flow::start(
        "b-a",
        (&pair.pod_b, "eth1"),
        (&pair.pod_a, "eth1"),
        0xb,
        every,
    )
    .unwrap();
    assert!(a_to_b.forwards(20, Duration::from_secs(2)));
    for round in 0..4 {
        let ports = worker.steer_pair(WIRE, pair.ends(), 1514).unwrap().ports;
        if round % 2 == 0 {
            worker.set_impairment(WIRE, ports[0].id, delay(5)).unwrap();
        }
        assert!(a_to_b.forwards(50, Duration::from_secs(2)), "round {round}");
        assert!(b_to_a.forwards(50, Duration::from_secs(2)), "round {round}");
        unsteer(&worker, &ports);
        assert!(a_to_b.forwards(50, Duration::from_secs(2)), "round {round}");
    }
    let (a_to_b, b_to_a) = (a_to_b.stop(), b_to_a.stop());
    for counts in [a_to_b, b_to_a] {
        assert!(counts.sent > 1000, "{counts:?}");
        assert_eq!(counts.send_errors, 0, "{counts:?}");
        assert_eq!(counts.lost(), 0, "{counts:?}");
    }
}
