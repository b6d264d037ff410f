//! `xwired`, the node daemon: answers the CNI plugin on the local API socket, keeps the
//! wire store, and runs the fast path for wires that cross nodes.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use xwire_control::api_server::{self, Job};
use xwire_control::config;
use xwire_control::node::Node;
use xwire_model::config::DaemonConfig;

/// Where the configuration is looked for when `--config` is not given; if there is no
/// file there, every field takes its default.
const DEFAULT_CONFIG: &str = "/etc/xwire/xwired.toml";

#[derive(Parser)]
#[command(name = "xwired", version, about = "The xwire node daemon")]
struct Args {
    /// The TOML configuration file (see control/README.md for its fields).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// This node's name, over the file's `node_name` (a DaemonSet passes the Node's).
    #[arg(long, env = "XWIRE_NODE_NAME")]
    node_name: Option<String>,
    /// The address peers dial, over the file's `node_address` (a DaemonSet passes the
    /// host IP with the port).
    #[arg(long, env = "XWIRE_NODE_ADDRESS")]
    node_address: Option<std::net::SocketAddr>,
    /// Instead of running: store the Topology objects of this file (a JSON array; `-`:
    /// standard input) in the store of `--state-dir`, for a node whose daemon is down,
    /// and exit. Its next start joins the links. What `xwirectl topology apply
    /// --state-dir` runs: the daemon alone opens its store.
    #[arg(long, value_name = "FILE", requires = "state_dir")]
    store_topologies: Option<PathBuf>,
    /// The state directory whose store `--store-topologies` writes to.
    #[arg(long, value_name = "DIR", requires = "store_topologies")]
    state_dir: Option<PathBuf>,
}

/// An error is one line on standard error and exit status 1, whatever RUST_BACKTRACE
/// says.
fn main() -> std::process::ExitCode {
    // `cargo xtask docs`: man pages and completions (see the xwire-cli-docs crate).
    xwire_cli_docs::generate_if_asked(<Args as clap::CommandFactory>::command);
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xwired: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    xwire_logs::init("info");
    let args = Args::parse();
    if let (Some(file), Some(dir)) = (&args.store_topologies, &args.state_dir) {
        return store_topologies(file, dir);
    }
    let mut config = match args.config {
        Some(path) => config::load(&path)?,
        None if std::path::Path::new(DEFAULT_CONFIG).exists() => {
            config::load(std::path::Path::new(DEFAULT_CONFIG))?
        }
        None => DaemonConfig::parse("", std::path::Path::new("(defaults)"))?,
    };
    if let Some(name) = args.node_name {
        xwire_proto::control::check_node_name(&name)
            .map_err(|e| anyhow::anyhow!("--node-name: {e}"))?;
        config.node_name = name.to_ascii_lowercase();
    }
    if let Some(address) = args.node_address {
        config.node_address = address;
    }
    raise_file_limit(config.max_ports);
    if config.chain.is_some() {
        // A DaemonSet: the pods' namespaces come through a mount from the host.
        xwire_control::netns_mount::warn_if_private();
    }
    let socket = config.api_socket.clone();
    let node = Node::start(config.clone()).context("starting the node")?;
    let (stop_chaining, chaining_stopped) = crossbeam_channel::bounded::<()>(1);
    let chaining = match config.chain.clone() {
        Some(chain) => Some(
            std::thread::Builder::new()
                .name("xwire-chain".into())
                .spawn(move || {
                    let installer = xwire_control::chain::Installer::new(chain);
                    xwire_control::chain::run(installer, chaining_stopped, CHAIN_RECHECK)
                })?,
        ),
        None => None,
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let metrics = node.metrics();
    let metrics_listener = match config.metrics_address {
        Some(address) => Some(
            xwire_control::metrics_server::bind(address, config.metrics_netns.as_deref())
                .with_context(|| format!("binding the metrics address {address}"))?,
        ),
        None => None,
    };
    let (jobs, inbox) = crossbeam_channel::bounded::<Job>(256);
    let node_thread = std::thread::Builder::new()
        .name("xwire-node".into())
        .spawn(move || api_server::run_node(node, inbox))?;
    runtime.block_on(async {
        // Listening for the stop signals before the socket exists: a supervisor that
        // stops the daemon as soon as the socket appears (a test does) was otherwise
        // caught in the moment before the listener was made, and the daemon never
        // stopped (seen once under strace).
        let stop = stop_signal();
        let listener = api_server::bind(&socket)
            .with_context(|| format!("binding the local API socket {}", socket.display()))?;
        if let Some(listener) = metrics_listener {
            tokio::spawn(xwire_control::metrics_server::serve(
                listener,
                jobs.clone(),
                std::sync::Arc::clone(&metrics),
            ));
        }
        tracing::info!(
            node = %config.node_name,
            socket = %socket.display(),
            peers = config.peers.len(),
            metrics = ?config.metrics_address,
            "xwired ready"
        );
        api_server::serve(listener, socket.clone(), jobs, metrics, stop).await;
        anyhow::Ok(())
    })?;
    tracing::info!("stopping");
    // Dropping the runtime drops the connections' tasks and, with them, the last senders
    // and the answers they await: the node thread finishes the job in hand, skips the
    // queued ones, and stops the fast path (peers are told) as the node drops.
    drop(runtime);
    let _ = node_thread.join();
    // Last, so that pods made until now had the plugin; after this the runtime skips it.
    drop(stop_chaining);
    if let Some(chaining) = chaining {
        let _ = chaining.join();
    }
    Ok(())
}

/// How often the chaining thread looks at the CNI configuration without being woken.
const CHAIN_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// File descriptors a node may hold at once, per fast-path port: its AF_XDP socket and
/// the epoll registration's share, a pod namespace opened while the port's wire is
/// joined or checked, and netlink sockets on short-lived threads.
const FILES_PER_PORT: u64 = 4;
/// Everything else: the store, the API socket and its connections, the peer transport.
const FILES_BESIDES_PORTS: u64 = 1024;

/// Raises the open-file limit to what `max_ports` needs (the common default of 1024 would
/// run out at about 250 remote wires, and every open after that fails with EMFILE). The
/// hard limit is raised too where this process may (root), up to the kernel's nr_open.
fn raise_file_limit(max_ports: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let wanted = max_ports as u64 * FILES_PER_PORT + FILES_BESIDES_PORTS;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(hard);
    let target = wanted.min(nr_open.max(hard));
    if soft >= target {
        return;
    }
    // The hard limit too where allowed (root); else as far as the hard limit goes.
    let raised = setrlimit(Resource::RLIMIT_NOFILE, target, hard.max(target))
        .or_else(|_| setrlimit(Resource::RLIMIT_NOFILE, target.min(hard), hard))
        .and_then(|()| getrlimit(Resource::RLIMIT_NOFILE));
    match raised {
        Ok((now, _)) => tracing::info!(from = soft, to = now, wanted, "open-file limit raised"),
        Err(e) => tracing::warn!(
            soft,
            hard,
            wanted,
            "cannot raise the open-file limit ({e}): wires beyond about {} may fail",
            soft.saturating_sub(FILES_BESIDES_PORTS) / FILES_PER_PORT
        ),
    }
}

/// Listens for SIGTERM and SIGINT from this call on (inside the runtime); the future ends
/// at the first.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let listeners = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = listeners else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// `--store-topologies`: the objects of `file`, checked against those stored, written
/// into the embedded store in `state_dir`, which no daemon may hold.
fn store_topologies(file: &std::path::Path, state_dir: &std::path::Path) -> anyhow::Result<()> {
    use std::io::Read;
    use xwire_control::store::{EmbeddedStore, TopologySource};
    let text = if file == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let objects: Vec<serde_json::Value> = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a JSON array of objects", file.display()))?;
    let store = EmbeddedStore::open_existing(state_dir)
        .context("the store (is its daemon still running?)")?;
    let stored = store.topologies()?;
    let incoming = xwire_model::topology::check_apply(objects, &stored)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    store.put_topologies(&incoming)?;
    for t in &incoming {
        println!("topology/{} stored in {}", t.key(), store.path().display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_argument_has_help_and_the_version_names_the_binary() {
        xwire_testbed::cli::assert_explains_itself(&super::Args::command(), "xwired");
    }
}
