//! The tunnels: a tokio runtime on a thread of its own runs the TUN device's read loop,
//! one dial loop per gateway this one dials, the accept loop, and a DATAGRAM read loop
//! per tunnel. A packet from the TUN device goes to the first gateway of its pool (in
//! the pool's order of preference) with a tunnel up.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use quinn::{Connection, Endpoint, SendDatagramError};
use xwire_pki::NodeIdentity;

use crate::packet::destination;
use crate::{tls, Counters, GatewayConfig, GatewayError};
use xwire_model::pools::Pools;

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The live tunnels, by the far gateway's node name.
#[derive(Clone, Default)]
pub(crate) struct Tunnels(Arc<RwLock<HashMap<String, Connection>>>);

impl Tunnels {
    pub(crate) fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().keys().cloned().collect();
        names.sort();
        names
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Connection>> {
        self.0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Connection>> {
        self.0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn up(&self, name: &str, connection: Connection) {
        tracing::info!(gateway = name, remote = %connection.remote_address(), "tunnel up");
        self.write().insert(name.to_owned(), connection);
    }

    /// Forgets `connection`, unless a newer one to the same gateway replaced it.
    fn down(&self, name: &str, connection: &Connection) {
        let mut map = self.write();
        if map
            .get(name)
            .is_some_and(|c| c.stable_id() == connection.stable_id())
        {
            map.remove(name);
            tracing::info!(gateway = name, "tunnel down");
        }
    }
}

/// The thread and how to stop it.
pub(crate) struct Running {
    thread: std::thread::JoinHandle<()>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Running {
    pub(crate) fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

struct Shared {
    me: String,
    my_pool: usize,
    pools: Pools,
    tun: tun::AsyncDevice,
    counters: Arc<Counters>,
    tunnels: Tunnels,
}

pub(crate) fn start(
    config: GatewayConfig,
    identity: &NodeIdentity,
    counters: Arc<Counters>,
    tunnels: Tunnels,
) -> Result<Running, GatewayError> {
    let my_pool = config
        .pools
        .all()
        .iter()
        .position(|p| p.gateways.iter().any(|g| g.node == config.node))
        .ok_or_else(|| GatewayError::Config(format!("{} is no pool's gateway", config.node)))?;
    let (wan, my_address) = config.pools.all()[my_pool]
        .gateways
        .iter()
        .find(|g| g.node == config.node)
        .map(|g| (g.wan, g.address))
        .expect("found above");
    let server = tls::server_config(identity, config.wan_mtu)?;
    let client = tls::client_config(identity, config.wan_mtu)?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), GatewayError>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("xwire-gateway".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(source) => {
                    let _ = ready_tx.send(Err(GatewayError::Io {
                        what: "start the gateway's runtime".into(),
                        cause: source,
                    }));
                    return;
                }
            };
            runtime.block_on(async move {
                let (tun, endpoint) = match open_devices(&config, wan, server, client) {
                    Ok(opened) => opened,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let shared = Arc::new(Shared {
                    me: config.node.clone(),
                    my_pool,
                    pools: config.pools.clone(),
                    tun,
                    counters,
                    tunnels,
                });
                let _ = ready_tx.send(Ok(()));
                let probes = SocketAddr::new(my_address, crate::probe::probe_port(wan.port()));
                spawn_tasks(&shared, &endpoint, probes, config.tunnel_mtu).await;
                let _ = stop_rx.await;
                endpoint.close(0u32.into(), b"gateway stopped");
            });
        })
        .map_err(|source| GatewayError::Io {
            what: "start the gateway's thread".into(),
            cause: source,
        })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(Running {
            thread,
            stop: stop_tx,
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(GatewayError::Config(
                "the gateway's thread ended before it was ready".into(),
            ))
        }
    }
}

/// Makes the TUN device and the QUIC endpoint on `wan` (in the gateway's runtime: the
/// device is an async one).
fn open_devices(
    config: &GatewayConfig,
    wan: SocketAddr,
    server: quinn::ServerConfig,
    client: quinn::ClientConfig,
) -> Result<(tun::AsyncDevice, Endpoint), GatewayError> {
    let mut tun_config = tun::Configuration::default();
    tun_config
        .tun_name(&config.tun_name)
        .mtu(config.tunnel_mtu)
        .up();
    let tun = tun::create_as_async(&tun_config).map_err(|e| GatewayError::Io {
        what: format!("make the TUN device {}", config.tun_name),
        cause: std::io::Error::other(e.to_string()),
    })?;
    let endpoint_config = tls::endpoint_config(config.wan_mtu)?;
    let mut endpoint = std::net::UdpSocket::bind(wan)
        .and_then(|socket| {
            let runtime = Arc::new(quinn::TokioRuntime);
            Endpoint::new(endpoint_config, Some(server), socket, runtime)
        })
        .map_err(|source| GatewayError::Io {
            what: format!("listen on {wan}"),
            cause: source,
        })?;
    endpoint.set_default_client_config(client);
    Ok((tun, endpoint))
}

/// Starts what the gateway runs until it stops: a dial loop to each gateway this one
/// dials, the accept loop, the answerer of the pool's probes on `probes`, and the TUN loop.
async fn spawn_tasks(shared: &Arc<Shared>, endpoint: &Endpoint, probes: SocketAddr, mtu: u16) {
    for (pool, gateway) in remote_gateways(shared) {
        let mine = &shared.pools.all()[shared.my_pool];
        let theirs = &shared.pools.all()[pool];
        if shared.pools.dials(mine, &shared.me, theirs, &gateway.0) {
            tokio::spawn(dial_loop(
                shared.clone(),
                endpoint.clone(),
                gateway.0,
                gateway.1,
            ));
        }
    }
    tokio::spawn(accept_loop(shared.clone(), endpoint.clone()));
    match tokio::net::UdpSocket::bind(probes).await {
        Ok(socket) => {
            tokio::spawn(answer_probes(shared.clone(), socket));
        }
        Err(e) => tracing::warn!(%probes, "the pool's nodes cannot probe this gateway: {e}"),
    }
    tokio::spawn(tun_loop(shared.clone(), mtu));
}

/// The other pools' gateways: (pool index, (node, tunnel address)).
fn remote_gateways(shared: &Shared) -> Vec<(usize, (String, SocketAddr))> {
    shared
        .pools
        .all()
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != shared.my_pool)
        .flat_map(|(i, p)| p.gateways.iter().map(move |g| (i, (g.node.clone(), g.wan))))
        .collect()
}

async fn dial_loop(shared: Arc<Shared>, endpoint: Endpoint, name: String, address: SocketAddr) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let connected = match endpoint.connect(address, &name) {
            Ok(connecting) => connecting.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match connected {
            Ok(connection) => {
                backoff = MIN_BACKOFF;
                carry(&shared, &name, connection).await;
            }
            Err(e) => tracing::debug!(gateway = %name, %address, "tunnel dial failed: {e}"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn accept_loop(shared: Arc<Shared>, endpoint: Endpoint) {
    while let Some(incoming) = endpoint.accept().await {
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(connection) = incoming.await else {
                return;
            };
            // Only another pool's gateway may tunnel to this one.
            let name = remote_gateways(&shared)
                .into_iter()
                .map(|(_, (name, _))| name)
                .find(|name| tls::is_for(&connection, name));
            match name {
                Some(name) => carry(&shared, &name, connection).await,
                None => connection.close(1u32.into(), b"not another pool's gateway"),
            }
        });
    }
}

/// Registers a tunnel and writes what it carries to the TUN device until it ends.
async fn carry(shared: &Shared, name: &str, connection: Connection) {
    shared.tunnels.up(name, connection.clone());
    while let Ok(datagram) = connection.read_datagram().await {
        if destination(&datagram).is_none() {
            shared
                .counters
                .dropped_malformed
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        match shared.tun.send(&datagram).await {
            Ok(_) => {
                shared.counters.received.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::debug!(gateway = name, "TUN write: {e}"),
        }
    }
    shared.tunnels.down(name, &connection);
}

async fn tun_loop(shared: Arc<Shared>, mtu: u16) {
    let mut buf = vec![0u8; usize::from(mtu) + 64];
    loop {
        let n = match shared.tun.recv(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("TUN read: {e}");
                return;
            }
        };
        let packet = &buf[..n];
        let counters = &shared.counters;
        let Some(dst) = destination(packet) else {
            counters.dropped_malformed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let pool = match shared.pools.pool_of(dst) {
            Some(pool) if pool != shared.my_pool => &shared.pools.all()[pool],
            _ => {
                counters.dropped_no_pool.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        let connection = {
            let tunnels = shared.tunnels.read();
            pool.gateways
                .iter()
                .find_map(|g| tunnels.get(&g.node).cloned())
        };
        let Some(connection) = connection else {
            counters.dropped_no_tunnel.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        match connection.send_datagram(Bytes::copy_from_slice(packet)) {
            Ok(()) => counters.sent.fetch_add(1, Ordering::Relaxed),
            Err(SendDatagramError::TooLarge) => {
                counters.dropped_too_big.fetch_add(1, Ordering::Relaxed)
            }
            Err(_) => counters.dropped_no_tunnel.fetch_add(1, Ordering::Relaxed),
        };
    }
}

/// Answers the pool's nodes' probes (see `probe.rs`) while the gateway runs.
async fn answer_probes(shared: Arc<Shared>, socket: tokio::net::UdpSocket) {
    let mut buf = [0u8; 64];
    while let Ok((n, from)) = socket.recv_from(&mut buf).await {
        let tunnels_up = !shared.tunnels.read().is_empty();
        if let Some(reply) = crate::probe::answer(&buf[..n], tunnels_up) {
            let _ = socket.send_to(reply, from).await;
        }
    }
}
