//! `xwirectl`: the operator's CLI. Talks to the node's daemon over the local API.

#![forbid(unsafe_code)]

mod lab;
mod wires;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use xwire_api_client as api_client;
use xwire_model::config::DEFAULT_API_SOCKET;
use xwire_model::topology;
use xwire_pki::write_private;
use xwire_pki::ClusterCa;
use xwire_proto::local::{Request, Response, TopologyApply, TopologyQuery};

#[derive(Parser)]
#[command(
    name = "xwirectl",
    version,
    about = "Control an xwire node, or run a lab"
)]
struct Args {
    /// The node daemon's local API socket, for the node commands (the lab's commands
    /// find their own nodes').
    #[arg(long, default_value = DEFAULT_API_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[command(flatten)]
    Node(NodeCommand),
    /// The standalone lab: nodes and pods in network namespaces on this machine.
    Lab {
        #[command(subcommand)]
        command: lab::LabCommand,
    },
    /// Prints xwirectl's completion script for a shell, e.g.
    /// `source <(xwirectl completion bash)`, or into
    /// `~/.local/share/bash-completion/completions/xwirectl`.
    Completion {
        /// The shell.
        shell: xwire_cli_docs::Shell,
    },
}

/// The commands that talk to one node's daemon (or make its certificates).
#[derive(Subcommand)]
enum NodeCommand {
    /// Topology objects (meshnet's Topology resource) in the node's store.
    Topology {
        #[command(subcommand)]
        command: TopologyCommand,
    },
    /// The node's wires, one line each, with the switch's counters of the ends it
    /// carries (frames each pod sent and received through it, and drops).
    Wires {
        /// Everything as JSON instead: the attachments, the wire records, and the
        /// fast path's counters (per wire end, per peer node, the worker's load).
        #[arg(long)]
        json: bool,
    },
    /// Runs a reconciliation pass now and prints what it changed (nothing, on a node
    /// that is as its store says).
    Reconcile,
    /// Captures the frames of one of the node's wires to pcapng, until Ctrl-C (or for
    /// --seconds): one interface per direction, named after the endpoint that sent.
    /// A same-node wire is steered through the switch while it is captured.
    Capture {
        /// The pod's (the Topology's) namespace.
        #[arg(long, short)]
        namespace: String,
        /// The pod whose end of the wire is captured.
        pod: String,
        /// The wire: the link's uid, or the pod's interface name.
        link: String,
        /// What the pod sends on the wire, what it receives, or both.
        #[arg(long, value_enum, default_value_t = lab::EndDirection::Both)]
        direction: lab::EndDirection,
        #[command(flatten)]
        output: lab::CaptureArgs,
    },
    /// Makes a cluster CA and a certificate and key for each node, as PEM files in DIR:
    /// ca.pem, NODE.pem and NODE.key.
    Certs {
        /// The directory the PEM files go to (made if missing).
        #[arg(long)]
        out: PathBuf,
        /// Node names.
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// Prints a Kubernetes Secret holding a new cluster CA (ca.crt, ca.key) and a
    /// ConfigMap with its certificate alone (ca.crt), for `kubectl apply -f -`.
    /// xwire-signer reads the Secret and signs each node's certificate; the nodes read
    /// only the ConfigMap. To rotate, give the CA in use with --also-trust: ca.crt then
    /// holds the new certificate first and the old one after it, so that nodes on either
    /// CA keep trusting each other while the DaemonSet rolls.
    CaSecret {
        /// The namespace of both objects.
        #[arg(long, default_value = "xwire-system")]
        namespace: String,
        /// The Secret's name.
        #[arg(long, default_value = "xwire-ca")]
        name: String,
        /// The ConfigMap's name (the nodes' `ca_bundle`).
        #[arg(long, default_value = "xwire-ca-bundle")]
        bundle_name: String,
        /// A PEM file of CA certificates to keep trusting (the current ca.crt).
        #[arg(long)]
        also_trust: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TopologyCommand {
    /// Stores the Topology objects in FILE (YAML or JSON; `-` reads standard input).
    /// Links of running pods follow: added links appear, removed ones disappear. Objects
    /// of other kinds in the file (a KNE user's Namespace and Pods) are listed as
    /// skipped.
    Apply {
        /// The file of Topology objects, as kubectl takes it (`-f deploy/kind/kne-lab.yaml`).
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        filename: Option<PathBuf>,
        /// The same file, given without -f.
        #[arg(
            value_name = "FILE",
            conflicts_with = "filename",
            required_unless_present = "filename"
        )]
        file: Option<PathBuf>,
        /// Write into the store in this state directory instead of asking the daemon,
        /// for a node whose daemon is down; its next start joins the links. Refused
        /// while a daemon holds the store.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Prints stored objects: all, a namespace's, or one.
    Get {
        /// Only this namespace's objects.
        #[arg(long, short)]
        namespace: Option<String>,
        /// Only the object of this name (its pod's name).
        name: Option<String>,
        /// Print YAML documents or one JSON array.
        #[arg(long, short, value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
    /// Removes a namespace's objects, or one; the pods' wires go with them.
    Delete {
        /// The namespace whose objects go (all of them without a name).
        #[arg(long, short)]
        namespace: Option<String>,
        /// Only the object of this name.
        name: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

const TIMEOUT: Duration = Duration::from_secs(60);

/// An error is one line on standard error and exit status 1, whatever RUST_BACKTRACE
/// says: a refused file or an unknown object is the user's to fix, not a crash.
fn main() -> std::process::ExitCode {
    // `cargo xtask docs`: man pages and completions (see the xwire-cli-docs crate).
    xwire_cli_docs::generate_if_asked(<Args as clap::CommandFactory>::command);
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xwirectl: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<std::process::ExitCode> {
    xwire_logs::init("warn");
    let args = Args::parse();
    let prints_only = match &args.command {
        Command::Lab { command } => lab::prints_only(command),
        Command::Node(_) | Command::Completion { .. } => true,
    };
    if prints_only {
        // A reader that stops early (`| head`) ends the command quietly, as it ends
        // coreutils; Rust's runtime ignores SIGPIPE, and the next print would panic.
        // Only for these: the others make labs and talk to daemons mid-change, where a
        // write to a closed socket must stay an error they handle and clean up after.
        sigpipe::reset();
    }
    match args.command {
        Command::Lab { command } => lab::run(command),
        Command::Completion { shell } => {
            let command = <Args as clap::CommandFactory>::command();
            xwire_cli_docs::completion(command, shell, &mut std::io::stdout());
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Node(command) => {
            node_command(&args.socket, command).map(|()| std::process::ExitCode::SUCCESS)
        }
    }
}

fn node_command(socket: &Path, command: NodeCommand) -> anyhow::Result<()> {
    match command {
        NodeCommand::Topology { command } => topology_command(socket, command),
        NodeCommand::Wires { json } => {
            let response = ask(socket, &Request::State)?;
            let Response::State(state) = response else {
                bail!("unexpected answer: {response:?}");
            };
            let response = ask(socket, &Request::Counters)?;
            let Response::Counters(counters) = response else {
                bail!("unexpected answer: {response:?}");
            };
            if json {
                let mut out = serde_json::to_value(&state)?;
                out["counters"] = serde_json::to_value(&counters)?;
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                print!("{}", wires::render(&state, &counters));
            }
            Ok(())
        }
        NodeCommand::Reconcile => {
            let response = ask(socket, &Request::Reconcile)?;
            let Response::Reconciled { changes, failures } = response else {
                bail!("unexpected answer: {response:?}");
            };
            if changes.is_empty() && failures.is_empty() {
                println!("nothing to change");
            }
            for change in &changes {
                println!("changed: {change}");
            }
            for failure in &failures {
                println!("failed: {failure}");
            }
            if !failures.is_empty() {
                bail!("{} change(s) could not be made", failures.len());
            }
            Ok(())
        }
        NodeCommand::Capture {
            namespace,
            pod,
            link,
            direction,
            output,
        } => {
            let (link_uid, ifname) = match link.parse::<u64>() {
                Ok(uid) => (Some(uid), None),
                Err(_) => (None, Some(link)),
            };
            let call = xwire_proto::local::CaptureCall {
                namespace,
                pod,
                link_uid,
                ifname,
                direction: direction.into(),
                snaplen: 0,
            };
            output.capture(socket, call)
        }
        NodeCommand::Certs { out, nodes } => certs(&out, &nodes),
        NodeCommand::CaSecret {
            namespace,
            name,
            bundle_name,
            also_trust,
        } => {
            let ca = ClusterCa::generate("xwire cluster CA")?;
            let mut trusted = ca.cert_pem();
            if let Some(path) = also_trust {
                let old = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                if !old.contains("-----BEGIN CERTIFICATE-----") {
                    bail!("{} holds no PEM certificate", path.display());
                }
                trusted.push_str(&old);
            }
            let secret = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "type": "Opaque",
                "stringData": {"ca.crt": trusted, "ca.key": ca.key_pem()},
            });
            let bundle = serde_json::json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": bundle_name, "namespace": namespace},
                "data": {"ca.crt": trusted},
            });
            print!(
                "{}---\n{}",
                serde_yaml_ng::to_string(&secret)?,
                serde_yaml_ng::to_string(&bundle)?
            );
            Ok(())
        }
    }
}

/// `topology apply --state-dir`: the daemon's binary writes the objects into the stopped
/// node's store (`xwired --store-topologies`), so that `xwirectl` links no store.
fn store_with_daemon(
    state_dir: &Path,
    file: &Path,
    objects: &[serde_json::Value],
) -> anyhow::Result<()> {
    let xwired = xwire_lab::up::find_binary("xwired")?;
    let mut child = std::process::Command::new(&xwired)
        .arg("--state-dir")
        .arg(state_dir)
        .args(["--store-topologies", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", xwired.display()))?;
    let input = serde_json::to_vec(objects)?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(&input)?;
    let status = child.wait()?;
    if !status.success() {
        bail!(
            "{} could not store the objects of {} ({status})",
            xwired.display(),
            file.display()
        );
    }
    Ok(())
}

fn topology_command(socket: &Path, command: TopologyCommand) -> anyhow::Result<()> {
    match command {
        TopologyCommand::Apply {
            filename,
            file,
            state_dir,
        } => {
            let file = filename
                .or(file)
                .expect("clap requires a file, with -f or without");
            let text = if file == Path::new("-") {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text)?;
                text
            } else {
                std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?
            };
            let (objects, others) = topology::parse_mixed(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            // A KNE user's file holds the Namespace and the Pods too: a cluster's
            // kubectl applies those; xwire stores the Topology objects.
            for other in &others {
                eprintln!("xwirectl: skipped {other}: not a Topology object (kubectl applies it in a cluster)");
            }
            let objects: Vec<serde_json::Value> = objects
                .iter()
                .map(serde_json::to_value)
                .collect::<Result<_, _>>()?;
            if let Some(dir) = state_dir {
                return store_with_daemon(&dir, &file, &objects);
            }
            // A list over what one call takes goes in pieces, each applied as it comes.
            for piece in TopologyApply::in_pieces(objects) {
                let response = ask(socket, &Request::TopologyApply(piece))?;
                for name in object_names(response)? {
                    println!("topology/{name} applied");
                }
            }
            Ok(())
        }
        TopologyCommand::Get {
            namespace,
            name,
            output,
        } => {
            let query = TopologyQuery { namespace, name };
            let response = ask(socket, &Request::TopologyGet(query.clone()))?;
            let Response::Topologies { objects } = response else {
                bail!("unexpected answer: {response:?}");
            };
            if objects.is_empty() {
                match (&query.namespace, &query.name) {
                    (Some(ns), Some(name)) => bail!("no Topology {name} in namespace {ns}"),
                    (None, Some(name)) => bail!("no Topology {name}"),
                    // An empty list is an answer when no one object was asked for.
                    _ => {}
                }
            }
            match output {
                Format::Json => println!("{}", serde_json::to_string_pretty(&objects)?),
                Format::Yaml => {
                    for object in &objects {
                        print!("---\n{}", serde_yaml_ng::to_string(object)?);
                    }
                }
            }
            Ok(())
        }
        TopologyCommand::Delete { namespace, name } => {
            let response = ask(
                socket,
                &Request::TopologyDelete(TopologyQuery { namespace, name }),
            )?;
            for name in object_names(response)? {
                println!("topology/{name} deleted");
            }
            Ok(())
        }
    }
}

fn object_names(response: Response) -> anyhow::Result<Vec<String>> {
    let Response::Topologies { objects } = response else {
        bail!("unexpected answer: {response:?}");
    };
    Ok(objects
        .iter()
        .map(|o| {
            let field = |f: &str| o["metadata"][f].as_str().unwrap_or("?").to_owned();
            format!("{}/{}", field("namespace"), field("name"))
        })
        .collect())
}

fn ask(socket: &Path, request: &Request) -> anyhow::Result<Response> {
    let response = api_client::call(socket, request, TIMEOUT)
        .with_context(|| format!("asking the daemon on {}", socket.display()))?;
    if let Response::Error(e) = response {
        if e.details.is_empty() {
            bail!("{} (code {})", e.msg, e.code);
        }
        bail!("{} (code {})\n{}", e.msg, e.code, e.details);
    }
    Ok(response)
}

fn certs(out: &Path, nodes: &[String]) -> anyhow::Result<()> {
    // Every name is checked before anything is written: a name becomes a file name and
    // a certificate's DNS name.
    for node in nodes {
        if let Err(e) = xwire_proto::control::check_node_name(node) {
            bail!("{e}");
        }
    }
    std::fs::create_dir_all(out)?;
    let ca = ClusterCa::generate("xwire cluster CA")?;
    std::fs::write(out.join("ca.pem"), ca.cert_pem())?;
    for node in nodes {
        let identity = ca.issue(node)?;
        std::fs::write(out.join(format!("{node}.pem")), &identity.cert_pem)?;
        write_private(
            &out.join(format!("{node}.key")),
            identity.key_pem.as_bytes(),
        )?;
    }
    println!(
        "wrote ca.pem and {} node certificates to {}",
        nodes.len(),
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_argument_has_help_and_the_version_names_the_binary() {
        xwire_testbed::cli::assert_explains_itself(&super::Args::command(), "xwirectl");
    }
}
