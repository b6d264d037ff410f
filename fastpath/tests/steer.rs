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

    /// A flow each way between the pods, a frame every `every`.
    fn flows(&self, every: Duration) -> (Flow, Flow) {
        let a = (&self.pod_a, "eth1");
        let b = (&self.pod_b, "eth1");
        (
            Flow::start("a-b", a, b, 0xa, every).unwrap(),
            Flow::start("b-a", b, a, 0xb, every).unwrap(),
        )
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
    let (a_to_b, b_to_a) = pair.flows(every);
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
        assert_eq!(counts.lost_on_the_way(), 0, "{counts:?}");
    }
}

/// A pod's frames are steered to the switch only once the worker forwards the pair's
/// ports, so none waits for them in a receiving ring. When the programs went on as the
/// keeper opened the ports, what came in the 26 to 88 ms until the worker had them ran
/// such a ring out (`rx_fill_ring_empty`). The rings here fill 224 frames, 18 ms of one
/// direction's frames: a round in which the worker itself was kept off its CPU for over
/// 16 ms says nothing, and is not counted.
#[test]
fn frames_steered_while_a_pair_is_put_in_place_find_room_in_its_rings() {
    let pair = Pair::new("xst-room");
    let _veth = pair.veth();
    let config = WorkerConfig {
        frames_per_port: 256,
        ..WorkerConfig::default()
    };
    let worker = pair.node.run(|| Worker::spawn(config)).unwrap().unwrap();
    let every = Duration::from_micros(80);
    let (a_to_b, b_to_a) = pair.flows(every);
    assert!(a_to_b.forwards(100, Duration::from_secs(2)));
    let long_aways = || worker.stats().unwrap().away.over[2];
    let mut counted = 0;
    for round in 0..12 {
        let aways = long_aways();
        let ports = worker.steer_pair(WIRE, pair.ends(), 1514).unwrap().ports;
        assert!(
            a_to_b.forwards(200, Duration::from_secs(2)),
            "round {round}"
        );
        assert!(
            b_to_a.forwards(200, Duration::from_secs(2)),
            "round {round}"
        );
        let drops = [0, 1].map(|n| worker.kernel_drops(ports[n].id).unwrap());
        let kept_off = long_aways() > aways;
        unsteer(&worker, &ports);
        if kept_off {
            eprintln!("round {round}: the worker was kept off its CPU for over 16 ms; not counted");
            continue;
        }
        counted += 1;
        for drop in drops {
            assert_eq!(drop.rx_fill_ring_empty, 0, "round {round}: {drops:?}");
            assert_eq!(drop.rx_ring_full, 0, "round {round}: {drops:?}");
        }
    }
    eprintln!("{counted} of 12 rounds counted");
    let (a_to_b, b_to_a) = (a_to_b.stop(), b_to_a.stop());
    for counts in [a_to_b, b_to_a] {
        assert_eq!(counts.send_errors, 0, "{counts:?}");
    }
}
