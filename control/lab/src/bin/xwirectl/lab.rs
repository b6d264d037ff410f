//! `xwirectl lab ...`: the standalone lab's commands (the work is in `xwire_lab`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use xwire_lab::{self as lab, bench, down, edit, status, supervisor, up};

#[derive(Subcommand)]
pub enum LabCommand {
    /// Brings up the lab described in FILE (see docs/lab-file.md): a namespace per node
    /// running its own xwired, a namespace per pod, every wire joined.
    Up { file: PathBuf },
    /// Nodes, pods, and every wire with its state, carrier and counters.
    Status {
        /// The lab (needed only when several are up).
        name: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Runs a command inside a pod's network namespace.
    Exec {
        /// The lab (needed only when several labs have a pod of that name).
        #[arg(long)]
        lab: Option<String>,
        pod: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Runs xwire-pktgen across every wire (or one), one wire at a time: throughput, then
    /// latency at a low rate. Prints a table and writes a PNG chart.
    Bench {
        /// The lab (needed only when several are up).
        name: Option<String>,
        /// Only the wire with this uid.
        #[arg(long)]
        link: Option<u64>,
        /// Seconds per run.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Frame size of the throughput run (capped at each wire's MTU).
        #[arg(long, default_value_t = 1514)]
        size: usize,
        /// Frames per second of the latency run.
        #[arg(long, default_value_t = 1000)]
        latency_rate: u64,
        /// Where the chart goes (default: LAB-bench.png here).
        #[arg(long)]
        chart: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Removes everything the lab made: processes, namespaces, interfaces, state. Works
    /// after a crash or a kill -9 of any part.
    Down {
        /// The lab (needed only when several are up).
        name: Option<String>,
    },
    /// Applies a changed lab file to the running lab of that name: added links and pods
    /// appear, removed ones disappear, the other pods and wires carry on untouched.
    Edit { file: PathBuf },
    /// Keeps the lab's daemons running (started by `lab up`; not for people).
    #[command(hide = true)]
    Supervise { name: String },
}

pub fn run(command: LabCommand) -> anyhow::Result<ExitCode> {
    match command {
        LabCommand::Up { file } => {
            let binaries = up::Binaries::find()?;
            let lab = up::up(&file, &binaries)?;
            let status = status::status(&lab);
            print!("{}", status::render(&status));
            println!("\nlook around:  xwirectl lab status {0}\n              xwirectl lab exec {1} -- ip addr\ntear down:    xwirectl lab down {0}", lab.name, lab.pods.keys().next().map(String::as_str).unwrap_or("POD"));
        }
        LabCommand::Status { name, json } => {
            let lab = lab::pick_lab(name.as_deref())?;
            let status = status::status(&lab);
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", status::render(&status));
            }
        }
        LabCommand::Exec {
            lab: name,
            pod,
            command,
        } => {
            let lab = lab::lab_with_pod(name.as_deref(), &pod)?;
            let code = lab::exec(&lab, &pod, &command)?;
            return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
        }
        LabCommand::Down { name } => {
            let (name, removed) = down::down(name.as_deref())?;
            println!(
                "lab {name} is down: {} processes stopped, {} namespaces removed",
                removed.processes, removed.namespaces
            );
        }
        LabCommand::Edit { file } => {
            let binaries = up::Binaries::find()?;
            let (lab, changes) = edit::edit(&file, &binaries)?;
            if changes.is_empty() {
                println!("lab {}: nothing to change", lab.name);
            } else {
                let list = |uids: &[u64]| {
                    uids.iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                println!(
                    "lab {}: links added [{}], removed [{}]; pods added [{}], removed [{}]",
                    lab.name,
                    list(&changes.links_added),
                    list(&changes.links_removed),
                    changes.pods_added.join(", "),
                    changes.pods_removed.join(", ")
                );
            }
        }
        LabCommand::Bench {
            name,
            link,
            seconds,
            size,
            latency_rate,
            chart,
            json,
        } => {
            let lab = lab::pick_lab(name.as_deref())?;
            let chart = chart.unwrap_or_else(|| PathBuf::from(format!("{}-bench.png", lab.name)));
            let options = bench::BenchOptions {
                link,
                seconds,
                size,
                latency_rate,
                chart: chart.clone(),
            };
            let results = bench::bench(&lab, &options)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&results)?);
            } else {
                print!("{}", bench::render(&results, &chart));
            }
        }
        LabCommand::Supervise { name } => {
            let binaries = up::Binaries::find()?;
            supervisor::supervise(&name, &binaries)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
