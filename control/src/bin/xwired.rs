//! `xwired`, the node daemon: answers the CNI plugin on the local API socket, keeps the
//! wire store, and runs the fast path for wires that cross nodes.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use xwire_control::api_server::{self, Job};
use xwire_control::config::DaemonConfig;
use xwire_control::node::Node;

/// Where the configuration is looked for when `--config` is not given; if there is no
/// file there, every field takes its default.
const DEFAULT_CONFIG: &str = "/etc/xwire/xwired.toml";

#[derive(Parser)]
#[command(version, about = "The xwire node daemon")]
struct Args {
    /// The TOML configuration file (see control/README.md for its fields).
    #[arg(long, short)]
    config: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let config = match args.config {
        Some(path) => DaemonConfig::load(&path)?,
        None if std::path::Path::new(DEFAULT_CONFIG).exists() => {
            DaemonConfig::load(std::path::Path::new(DEFAULT_CONFIG))?
        }
        None => DaemonConfig::parse("", std::path::Path::new("(defaults)"))?,
    };
    let socket = config.api_socket.clone();
    let node = Node::start(config.clone()).context("starting the node")?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (jobs, inbox) = crossbeam_channel::bounded::<Job>(256);
    let node_thread = std::thread::Builder::new()
        .name("xwire-node".into())
        .spawn(move || api_server::run_node(node, inbox))?;
    runtime.block_on(async {
        let listener = api_server::bind(&socket)
            .with_context(|| format!("binding the local API socket {}", socket.display()))?;
        tracing::info!(
            node = %config.node_name,
            socket = %socket.display(),
            peers = config.peers.len(),
            "xwired ready"
        );
        api_server::serve(listener, socket.clone(), jobs, stop_signal()).await;
        anyhow::Ok(())
    })?;
    tracing::info!("stopping");
    // The server dropped its sender: the node thread finishes its job and stops the
    // fast path (peers are told) as the node drops.
    let _ = node_thread.join();
    Ok(())
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
