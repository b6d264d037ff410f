//! How a pool's nodes tell, within half a second, that a gateway's daemon is gone: every
//! 100 ms they send each gateway of their pool a small UDP probe (to its pool address,
//! the tunnel's port + 1), and the gateway answers while it runs and has a tunnel up. A
//! gateway that answered in the last `UP_WITHIN` is up. (The nodes' QUIC connection to
//! the gateway would say the same only after its 3 s idle timeout.)

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often a node probes each gateway.
pub(crate) const PROBE_EVERY: Duration = Duration::from_millis(100);
/// A gateway that answered within this is up.
pub(crate) const UP_WITHIN: Duration = Duration::from_millis(500);
/// What a probe and an answer hold: a marker, and (in an answer) whether a tunnel is up.
const PROBE: &[u8; 8] = b"xwgw-prb";
const ANSWER_READY: &[u8; 8] = b"xwgw-up1";
const ANSWER_NO_TUNNEL: &[u8; 8] = b"xwgw-up0";

/// The probe port of a gateway whose tunnel listens on `tunnel_port`.
pub fn probe_port(tunnel_port: u16) -> u16 {
    tunnel_port.wrapping_add(1)
}

/// The answer a gateway gives a probe (`None`: not a probe, no answer).
pub fn answer(datagram: &[u8], tunnels_up: bool) -> Option<&'static [u8; 8]> {
    (datagram == PROBE).then_some(if tunnels_up {
        ANSWER_READY
    } else {
        ANSWER_NO_TUNNEL
    })
}

/// A node's probes of its pool's gateways, on a thread of its own; stops when dropped.
pub struct GatewayProbe {
    answered: Arc<Mutex<HashMap<String, Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GatewayProbe {
    /// Probes `gateways` (name, probe address) from `bind` (the node's pool address).
    pub fn start(
        bind: SocketAddr,
        gateways: Vec<(String, SocketAddr)>,
    ) -> std::io::Result<GatewayProbe> {
        let socket = UdpSocket::bind(bind)?;
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let answered = Arc::new(Mutex::new(HashMap::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (answered, stop) = (answered.clone(), stop.clone());
            std::thread::Builder::new()
                .name("xwire-gw-probe".into())
                .spawn(move || run(&socket, &gateways, &answered, &stop))?
        };
        Ok(GatewayProbe {
            answered,
            stop,
            thread: Some(thread),
        })
    }

    /// Whether gateway `name` answered, with a tunnel up, within `UP_WITHIN`.
    pub fn is_up(&self, name: &str) -> bool {
        self.answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .is_some_and(|t| t.elapsed() <= UP_WITHIN)
    }
}

impl Drop for GatewayProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    socket: &UdpSocket,
    gateways: &[(String, SocketAddr)],
    answered: &Mutex<HashMap<String, Instant>>,
    stop: &AtomicBool,
) {
    let mut next = Instant::now();
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next {
            for (_, address) in gateways {
                // A gateway that is gone answers nothing; an error here says the same.
                let _ = socket.send_to(PROBE, address);
            }
            next += PROBE_EVERY;
        }
        match socket.recv_from(&mut buf) {
            Ok((n, from)) if &buf[..n] == ANSWER_READY => {
                if let Some((name, _)) = gateways.iter().find(|(_, a)| *a == from) {
                    answered
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), Instant::now());
                }
            }
            // No answer yet, an answer without a tunnel, or something else: nothing.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_answers_probes_only_and_says_whether_a_tunnel_is_up() {
        assert_eq!(answer(PROBE, true), Some(ANSWER_READY));
        assert_eq!(answer(PROBE, false), Some(ANSWER_NO_TUNNEL));
        assert_eq!(answer(b"something", true), None);
    }

    #[test]
    fn a_gateway_that_answers_is_up_and_one_that_stops_is_not() {
        let gateway = UdpSocket::bind("127.0.0.1:0").unwrap();
        gateway
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let probe = GatewayProbe::start(
            "127.0.0.1:0".parse().unwrap(),
            vec![("g".into(), gateway.local_addr().unwrap())],
        )
        .unwrap();
        let mut buf = [0u8; 64];
        let deadline = Instant::now() + Duration::from_secs(2);
        while !probe.is_up("g") && Instant::now() < deadline {
            if let Ok((n, from)) = gateway.recv_from(&mut buf) {
                if let Some(reply) = answer(&buf[..n], true) {
                    gateway.send_to(reply, from).unwrap();
                }
            }
        }
        assert!(probe.is_up("g"));
        assert!(!probe.is_up("other"));
        std::thread::sleep(UP_WITHIN + Duration::from_millis(100));
        assert!(!probe.is_up("g"), "no answers since");
    }
}
