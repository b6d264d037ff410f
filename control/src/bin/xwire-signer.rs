//! `xwire-signer`: signs each node daemon's certificate request for its own node, so that
//! no node holds the cluster CA's key (deploy/base/signer.yaml runs it; see
//! control/src/signer).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use xwire_control::ca_secret::object_ref;
use xwire_control::signer::{Policy, Signer};

#[derive(Parser)]
#[command(
    name = "xwire-signer",
    version,
    about = "Signs xwire node certificates requested by the node daemons"
)]
struct Args {
    /// A kubeconfig file; none: the in-cluster service account (or KUBECONFIG).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The Secret holding the CA (`ca.crt`, `ca.key`): `namespace/name`, or `name` in the
    /// signer's own namespace.
    #[arg(long, default_value = "xwire-ca")]
    ca_secret: String,
    /// The signer name answered (the requests' `spec.signerName`).
    #[arg(long, default_value = xwire_control::store::SIGNER_NAME)]
    signer_name: String,
    /// The node daemons' ServiceAccount (`namespace/name`, or `name` in the signer's own
    /// namespace): only its requests are signed.
    #[arg(long, default_value = "xwired")]
    node_account: String,
    /// Days a node certificate is valid (a node asks anew at each start).
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u64).range(1..=365))]
    validity_days: u64,
}

fn main() -> std::process::ExitCode {
    xwire_cli_docs::generate_if_asked(<Args as clap::CommandFactory>::command);
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xwire-signer: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    xwire_logs::init("info");
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = xwire_control::store::kube_client(args.kubeconfig.as_deref()).await?;
        let own = client.default_namespace().to_owned();
        let (namespace, account) = object_ref(&args.node_account, &own);
        let signer = Signer {
            policy: Policy {
                signer_name: args.signer_name.clone(),
                requester: format!("system:serviceaccount:{namespace}:{account}"),
                validity: Duration::from_secs(args.validity_days * 24 * 3600),
            },
            ca_secret: args.ca_secret.clone(),
            client,
        };
        // PID 1 of its container: without a handler, SIGTERM would be ignored and every
        // deletion or roll of the Deployment would wait out the grace period.
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        tokio::select! {
            result = signer.run() => result,
            _ = terminate.recv() => Ok(()),
            _ = interrupt.recv() => Ok(()),
        }
    })
}
