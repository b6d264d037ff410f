//! `xwirectl lab ...`: the standalone lab's commands (the work is in `xwire_lab`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use xwire_lab::impairment::Directions;
use xwire_lab::{
    self as lab, bench, capture, down, edit, graph, impairment, import, logs, status, supervisor,
    up,
};
use xwire_model::impairment::{Impairment, LossBurst};
use xwire_proto::local::{CaptureCall, CaptureDirection};

/// A direction of a link: from its first endpoint in the lab file (A) to its second (B),
/// back, or both.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LinkDirection {
    AToB,
    BToA,
    Both,
}

impl From<LinkDirection> for Directions {
    fn from(d: LinkDirection) -> Directions {
        match d {
            LinkDirection::AToB => Directions::AToB,
            LinkDirection::BToA => Directions::BToA,
            LinkDirection::Both => Directions::Both,
        }
    }
}

/// The running lab a command works on: every lab command names it the same way.
#[derive(Args)]
pub struct LabChoice {
    /// The lab, by its name or its lab file (needed only when several are up).
    #[arg(long, value_name = "NAME|FILE")]
    lab: Option<String>,
}

impl LabChoice {
    /// The lab's name, read from its file when a file was given.
    fn name(&self) -> anyhow::Result<Option<String>> {
        self.lab.as_deref().map(lab::name_or_file).transpose()
    }

    /// The running lab.
    fn pick(&self) -> anyhow::Result<lab::file::Lab> {
        lab::pick_lab(self.name()?.as_deref())
    }
}

/// A link of a running lab and the direction(s) of it a command works on.
#[derive(Args)]
pub struct LinkChoice {
    /// The link: its uid, or one endpoint as POD:IF.
    link: String,
    #[command(flatten)]
    lab: LabChoice,
    /// A to B (what endpoint A sends), B to A, or both.
    #[arg(long, value_enum, default_value_t = LinkDirection::Both)]
    direction: LinkDirection,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GraphFormat {
    Mermaid,
    Dot,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EndDirection {
    Egress,
    Ingress,
    Both,
}

impl From<EndDirection> for CaptureDirection {
    fn from(d: EndDirection) -> CaptureDirection {
        match d {
            EndDirection::Egress => CaptureDirection::Egress,
            EndDirection::Ingress => CaptureDirection::Ingress,
            EndDirection::Both => CaptureDirection::Both,
        }
    }
}

/// Where a capture goes and how much of it.
#[derive(Args)]
pub struct CaptureArgs {
    /// Where the pcapng file goes (default: NAMESPACE-linkUID.pcapng here); `-` streams
    /// it to standard output, for `| tshark -r -`, but never to a terminal.
    #[arg(short = 'w', long = "write")]
    write: Option<PathBuf>,
    /// Bytes kept of each frame (0: whole frames).
    #[arg(long, default_value_t = 0)]
    snaplen: u32,
    /// Stop after this many seconds instead of at Ctrl-C.
    #[arg(long)]
    seconds: Option<f64>,
}

impl CaptureArgs {
    /// Refuses standard output when it is a terminal: pcapng is binary, and a terminal
    /// fed it is left in a mess (tcpdump refuses too). Checked before anything else.
    pub fn check_destination(&self) -> anyhow::Result<()> {
        use std::io::IsTerminal;
        if self.write.as_deref() == Some(std::path::Path::new("-"))
            && std::io::stdout().is_terminal()
        {
            anyhow::bail!(
                "standard output is a terminal: capture to a file (-w FILE), or pipe it (-w - | tshark -r -)"
            );
        }
        Ok(())
    }

    /// Captures what `call` names (its snap length taken from here).
    pub fn capture(&self, socket: &std::path::Path, mut call: CaptureCall) -> anyhow::Result<()> {
        self.check_destination()?;
        call.snaplen = self.snaplen;
        let file = match &self.write {
            Some(path) => path.clone(),
            None => {
                let what = match (call.link_uid, &call.ifname) {
                    (Some(uid), _) => format!("link{uid}"),
                    (None, Some(ifname)) => format!("{}-{ifname}", call.pod),
                    (None, None) => call.pod.clone(),
                };
                let file = PathBuf::from(format!("{}-{what}.pcapng", call.namespace));
                eprintln!("capturing to {} (Ctrl-C stops)", file.display());
                file
            }
        };
        let output = capture::Output::from_arg(&file);
        capture::capture(socket, call, &output, self.seconds).map(drop)
    }
}

/// The settings of `lab impair` (docs/lab-file.md describes each).
#[derive(Args)]
pub struct ImpairArgs {
    /// Added latency, e.g. 10ms, 250us.
    #[arg(long)]
    delay: Option<String>,
    /// Spread around the delay, e.g. 1ms.
    #[arg(long)]
    jitter: Option<String>,
    /// How jitter is spread: uniform or normal.
    #[arg(long)]
    jitter_distribution: Option<String>,
    /// Percent of frames lost at random.
    #[arg(long, conflicts_with = "loss_burst")]
    loss: Option<f64>,
    /// Losses in bursts (Gilbert-Elliott), in place of --loss: P,R[,GOOD_LOSS,BAD_LOSS],
    /// the percent chance per frame of going to the bad state (P) and back (R), and the
    /// percent lost in each (0 and 100 by default): `--loss-burst 1,25`.
    #[arg(long, value_name = "P,R[,GOOD,BAD]", value_parser = parse_loss_burst)]
    loss_burst: Option<LossBurst>,
    /// Rate limit, e.g. 100mbit, 1gbit.
    #[arg(long)]
    rate: Option<String>,
    /// The rate limit's queue in frames (default 1000).
    #[arg(long)]
    queue_frames: Option<u64>,
    /// The rate limit's queue in bytes.
    #[arg(long)]
    queue_bytes: Option<u64>,
    /// Percent of frames with a bit flipped.
    #[arg(long)]
    corrupt: Option<f64>,
    /// Percent of frames sent twice.
    #[arg(long)]
    duplicate: Option<f64>,
    /// Percent of frames sent ahead of those the delay holds.
    #[arg(long)]
    reorder: Option<f64>,
}

/// `P,R` or `P,R,GOOD_LOSS,BAD_LOSS` (percentages; checked with the rest of the
/// impairment).
fn parse_loss_burst(text: &str) -> Result<LossBurst, String> {
    let numbers = text
        .split(',')
        .map(|n| n.trim().parse::<f64>().map_err(|e| format!("{n:?}: {e}")))
        .collect::<Result<Vec<f64>, String>>()?;
    match numbers[..] {
        [p, r] => Ok(LossBurst {
            p,
            r,
            good_loss: 0.0,
            bad_loss: 100.0,
        }),
        [p, r, good_loss, bad_loss] => Ok(LossBurst {
            p,
            r,
            good_loss,
            bad_loss,
        }),
        _ => Err("give P,R or P,R,GOOD_LOSS,BAD_LOSS".into()),
    }
}

impl ImpairArgs {
    fn impairment(&self) -> Impairment {
        Impairment {
            delay: self.delay.clone(),
            jitter: self.jitter.clone(),
            jitter_distribution: self.jitter_distribution.clone(),
            loss: self.loss,
            loss_burst: self.loss_burst.clone(),
            rate: self.rate.clone(),
            queue_frames: self.queue_frames,
            queue_bytes: self.queue_bytes,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            reorder: self.reorder,
        }
    }
}

#[derive(Subcommand)]
pub enum LabCommand {
    /// Brings up the lab described in FILE (see docs/lab-file.md): a namespace per node
    /// running its own xwired, a namespace per pod, every wire joined.
    Up {
        /// The lab file.
        file: PathBuf,
        /// Run no container: every pod is a bare namespace, for trying a lab's wiring
        /// before its images exist (an imported lab, most often).
        #[arg(long)]
        no_containers: bool,
    },
    /// Nodes, pods, and every wire with its state, carrier and counters.
    Status {
        #[command(flatten)]
        lab: LabChoice,
        /// Print JSON (the same fields) instead of tables.
        #[arg(long)]
        json: bool,
        /// Exit with status 1 when a wire is not up or a node's daemon is down (after
        /// printing the status as usual): for scripts that wait on a lab.
        #[arg(long)]
        check: bool,
    },
    /// Prints a containerlab topology file as a lab file, read as containerlab reads it
    /// (environment variables and node placeholders expanded; defaults, kinds, groups
    /// and node inherited field by field): its nodes (image, cmd, env, labels, binds,
    /// exec) as pods, its links between node interfaces (brief or extended form) as
    /// links. Each field that has no lab field is named in a warning; what cannot be a
    /// lab (links to the host's side, bridge kinds) is refused with its line. A KNE
    /// topology (`*.pb.txt`, protobuf text format) is read by KNE's schema.
    Import {
        /// The containerlab topology file (e.g. lab.clab.yml), or KNE's (topo.pb.txt).
        file: PathBuf,
        /// How many emulated nodes to spread the pods over, round robin.
        #[arg(long, default_value_t = 1)]
        nodes: usize,
        /// The lab's name, instead of the one derived from the file's `name:`.
        #[arg(long)]
        name: Option<String>,
        /// Write the lab file here instead of to standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// The labs that are up (or that left something behind for `lab down` to remove):
    /// their nodes, pods and wires, age, and whether their supervisor runs.
    List {
        /// One JSON array instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The logs of a node's daemon, or of the supervisor and every daemon (each line
    /// prefixed by where it came from). What the daemons log is set by XWIRE_LOG (or
    /// RUST_LOG) in the environment of `lab up`, e.g. XWIRE_LOG=debug.
    Logs {
        /// The node whose daemon's log to show (default: all, and the supervisor's).
        node: Option<String>,
        #[command(flatten)]
        lab: LabChoice,
        /// Only the last N lines of each log.
        #[arg(long, short = 'n', value_name = "N")]
        lines: Option<usize>,
        /// Keep printing lines as they are written, until Ctrl-C or the lab goes down.
        #[arg(long, short)]
        follow: bool,
    },
    /// Prints the lab's topology as a graph: nodes holding their pods, and each wire with
    /// its uid, interfaces, kind and carrier. Mermaid renders on GitHub and in many
    /// editors; `--format dot | dot -Tpng` draws it with Graphviz.
    Graph {
        #[command(flatten)]
        lab: LabChoice,
        /// Mermaid flowchart or Graphviz DOT.
        #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
        format: GraphFormat,
    },
    /// Runs a command in a pod (its container, or its network namespace for a pod that
    /// runs none), or in several: every pod with --all, those whose labels match with
    /// --label. With several, they run one after another, each line of their output
    /// prefixed by the pod's name, and the status is 1 when any failed.
    Exec {
        #[command(flatten)]
        lab: LabChoice,
        /// The pod.
        #[arg(required_unless_present_any = ["all", "label"], conflicts_with_all = ["all", "label"])]
        pod: Option<String>,
        /// Every pod of the lab.
        #[arg(long, conflicts_with = "label")]
        all: bool,
        /// The pods with this label (KEY=VALUE; given again, a pod must have each).
        #[arg(long, short = 'l', value_name = "KEY=VALUE")]
        label: Vec<String>,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Makes each pod's running configuration its startup one, by the command its image
    /// has for that (`save` in the lab file; an imported node gets its kind's, as
    /// containerlab runs it). Pods without one are listed.
    Save {
        #[command(flatten)]
        lab: LabChoice,
    },
    /// Runs xwire-pktgen across every wire (or one), one wire at a time: the loss-free
    /// rate of each direction, alone and both at once (a search over offered rates), then
    /// latency at a low rate. Prints a table and writes a PNG chart.
    Bench(BenchArgs),
    /// Removes everything the lab made: processes, namespaces, interfaces, state. Works
    /// after a crash or a kill -9 of any part.
    Down {
        #[command(flatten)]
        lab: LabChoice,
    },
    /// Applies a changed lab file to the running lab of that name: added links and pods
    /// appear, removed ones disappear, the other pods and wires carry on untouched.
    Edit {
        /// The changed lab file (its name says which lab).
        file: PathBuf,
    },
    /// Impairs a link of the running lab, per direction: the settings given are laid over
    /// what is in force (--clear takes it all away). LINK is a uid or an endpoint POD:IF;
    /// A is the link's first endpoint in the lab file.
    Impair {
        #[command(flatten)]
        which: LinkChoice,
        #[command(flatten)]
        settings: ImpairArgs,
        /// Take every impairment of the direction(s) away.
        #[arg(long, conflicts_with_all = ["delay", "jitter", "jitter_distribution", "loss", "loss_burst", "rate", "queue_frames", "queue_bytes", "corrupt", "duplicate", "reorder"])]
        clear: bool,
    },
    /// Captures a link's frames to pcapng until Ctrl-C (or for --seconds), taken at
    /// endpoint A's node: one interface per direction, named after the endpoint that
    /// sent. `-w -` streams to standard output: `xwirectl lab capture 1 -w - | tshark -r -`.
    Capture {
        #[command(flatten)]
        which: LinkChoice,
        #[command(flatten)]
        output: CaptureArgs,
    },
    /// Keeps the lab's daemons running (started by `lab up`; not for people).
    #[command(hide = true)]
    Supervise { name: String },
}

/// `lab bench`'s arguments.
#[derive(Args)]
pub struct BenchArgs {
    #[command(flatten)]
    lab: LabChoice,
    /// Only the wire with this uid.
    #[arg(long)]
    link: Option<u64>,
    /// Seconds per short trial of the search (each direction takes up to 11), and
    /// of the latency run.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Seconds of the trial that confirms the rate the short trials found: the
    /// loss-free rate holds for this long (up to 4 tries, each lower than the last, by
    /// a step that doubles); 0 lets the short trials decide.
    #[arg(long, default_value_t = 10.0)]
    confirm_seconds: f64,
    /// Frame size of the loss-free search (capped at each wire's MTU).
    #[arg(long, default_value_t = 1514)]
    size: usize,
    /// The directions searched, in order: a-to-b (from the link's first endpoint),
    /// b-to-a, both (at once).
    #[arg(long, value_delimiter = ',', default_values = ["a-to-b", "b-to-a", "both"],
          value_parser = ["a-to-b", "b-to-a", "both"])]
    flows: Vec<String>,
    /// The highest loss of a loss-free rate (0.001 is 0.1%, RFC 2544 asks for 0).
    #[arg(long, default_value_t = 0.001)]
    max_loss: f64,
    /// Frames per second of the latency run.
    #[arg(long, default_value_t = 1000)]
    latency_rate: u64,
    /// Skip the baseline: by default each pair of nodes that a remote wire joins
    /// also gets a kernel VXLAN between them, measured the same way, so a wire's
    /// figures read against what the kernel does on this machine.
    #[arg(long)]
    no_baseline: bool,
    /// Where the chart goes (default: LAB-bench.png here).
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Print every trial of each loss-free search after the tables, the full-rate one
    /// first (the JSON carries them always, as each direction's `search`).
    #[arg(long)]
    trials: bool,
}

/// Writes `output`'s lines, each after `[pod] `.
fn print_prefixed(pod: &str, output: &[u8], out: &mut impl std::io::Write) -> std::io::Result<()> {
    for line in String::from_utf8_lossy(output).lines() {
        writeln!(out, "[{pod}] {line}")?;
    }
    out.flush()
}

/// Whether `command` only reads and prints (nothing to clean up if it ends mid-output).
pub fn prints_only(command: &LabCommand) -> bool {
    matches!(
        command,
        LabCommand::Status { .. }
            | LabCommand::Import { .. }
            | LabCommand::List { .. }
            | LabCommand::Logs { .. }
            | LabCommand::Graph { .. }
    )
}

pub fn run(command: LabCommand) -> anyhow::Result<ExitCode> {
    match command {
        LabCommand::Up {
            file,
            no_containers,
        } => up_lab(&file, no_containers)?,
        LabCommand::Status { lab, json, check } => {
            let lab = lab.pick()?;
            let status = status::status(&lab);
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print!("{}", status::render(&status));
            }
            if check && !status.all_up() {
                return Ok(ExitCode::FAILURE);
            }
        }
        LabCommand::Graph { lab, format } => {
            let lab = lab.pick()?;
            let status = status::status(&lab);
            let format = match format {
                GraphFormat::Mermaid => graph::Format::Mermaid,
                GraphFormat::Dot => graph::Format::Dot,
            };
            print!("{}", graph::render(&lab, &status, format));
        }
        LabCommand::Logs {
            node,
            lab,
            lines,
            follow,
        } => {
            let lab = lab.pick()?;
            logs::show(
                &lab,
                node.as_deref(),
                lines,
                follow,
                &mut std::io::stdout().lock(),
            )?;
        }
        LabCommand::Import {
            file,
            nodes,
            name,
            output,
        } => import_file(&file, nodes, name.as_deref(), output)?,
        LabCommand::List { json } => {
            let labs = lab::list::list();
            if json {
                println!("{}", serde_json::to_string_pretty(&labs)?);
            } else {
                print!("{}", lab::list::render(&labs));
            }
        }
        LabCommand::Exec {
            lab,
            pod,
            all,
            label,
            command,
        } => return exec_in_pods(lab, pod, all, &label, &command),
        LabCommand::Save { lab } => {
            let lab = lab.pick()?;
            let report = lab::save::save(&lab)?;
            print!("{}", report.render());
            if !report.failed.is_empty() {
                return Ok(ExitCode::FAILURE);
            }
        }
        LabCommand::Down { lab } => {
            let (name, removed) = down::down(lab.name()?.as_deref())?;
            println!("lab {name} is down: {removed}");
        }
        LabCommand::Edit { file } => edit_lab(&file)?,
        LabCommand::Bench(args) => bench_lab(args)?,
        LabCommand::Impair {
            which,
            settings,
            clear,
        } => impair_link(which, &settings, clear)?,
        LabCommand::Capture { which, output } => capture_link(which, &output)?,
        LabCommand::Supervise { name } => {
            let binaries = up::Binaries::find()?;
            supervisor::supervise(&name, &binaries)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `lab up`: brings the lab up and says how it went and where to look.
fn up_lab(file: &std::path::Path, no_containers: bool) -> anyhow::Result<()> {
    let binaries = up::Binaries::find()?;
    let (lab, phases) = up::up(file, &binaries, no_containers)?;
    let status = status::status(&lab);
    print!("{}", status::render(&status));
    println!("\n{}", phases.render());
    println!("\nlook around:  xwirectl lab status --lab {0}\n              xwirectl lab exec {1} --lab {0} -- ip addr\ntear down:    xwirectl lab down --lab {0}", lab.name, lab.pods.keys().next().map(String::as_str).unwrap_or("POD"));
    Ok(())
}

/// `lab import`: a containerlab or KNE file as a lab file, to `output` or standard output.
fn import_file(
    file: &std::path::Path,
    nodes: usize,
    name: Option<&str>,
    output: Option<PathBuf>,
) -> anyhow::Result<()> {
    let text =
        xwire_lab::file::read(file).with_context(|| format!("reading {}", file.display()))?;
    let imported = import::import(&text, file, nodes, name)
        .with_context(|| format!("importing {}", file.display()))?;
    for warning in &imported.warnings {
        eprintln!("xwirectl: warning: {warning}");
    }
    match output {
        Some(path) => std::fs::write(&path, imported.lab)
            .with_context(|| format!("writing {}", path.display()))?,
        None => print!("{}", imported.lab),
    }
    Ok(())
}

/// `lab exec`: runs `command` in one pod (its exit code is ours) or in each selected pod
/// (failure if it failed in any).
fn exec_in_pods(
    choice: LabChoice,
    pod: Option<String>,
    all: bool,
    label: &[String],
    command: &[String],
) -> anyhow::Result<ExitCode> {
    if let Some(pod) = pod {
        let lab = lab::lab_with_pod(choice.name()?.as_deref(), &pod)?;
        let code = lab::exec(&lab, &pod, command)?;
        return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
    }
    let lab = choice.pick()?;
    let selector = lab::PodSelector::parse(all, label)?;
    let pods = selector.pods(&lab);
    if pods.is_empty() {
        anyhow::bail!("no pod of lab {} has {}", lab.name, selector);
    }
    let mut failed = Vec::new();
    for pod in &pods {
        let out = lab::exec_captured(&lab, pod, command)?;
        print_prefixed(pod, &out.stdout, &mut std::io::stdout().lock())?;
        print_prefixed(pod, &out.stderr, &mut std::io::stderr().lock())?;
        if !out.status.success() {
            failed.push(format!("{pod} ({})", out.status));
        }
    }
    if !failed.is_empty() {
        eprintln!("xwirectl: the command failed in {}", failed.join(", "));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `lab edit`: brings the running lab to its edited file, and lists what changed.
fn edit_lab(file: &std::path::Path) -> anyhow::Result<()> {
    let binaries = up::Binaries::find()?;
    let (lab, changes) = edit::edit(file, &binaries)?;
    if changes.is_empty() {
        println!("lab {}: nothing to change", lab.name);
        return Ok(());
    }
    let list = |uids: &[u64]| {
        uids.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "lab {}: links added [{}], removed [{}], impairment changed [{}]; pods added [{}], removed [{}]",
        lab.name,
        list(&changes.links_added),
        list(&changes.links_removed),
        list(&changes.links_impaired),
        changes.pods_added.join(", "),
        changes.pods_removed.join(", ")
    );
    Ok(())
}

/// `lab bench`: the loss-free search and latency of each wire (or one), as a table or
/// JSON, and the chart.
fn bench_lab(args: BenchArgs) -> anyhow::Result<()> {
    let lab = args.lab.pick()?;
    let chart = args
        .chart
        .unwrap_or_else(|| PathBuf::from(format!("{}-bench.png", lab.name)));
    let options = bench::BenchOptions {
        link: args.link,
        seconds: args.seconds,
        confirm_seconds: args.confirm_seconds,
        size: args.size,
        flows: args.flows,
        max_loss: args.max_loss,
        latency_rate: args.latency_rate,
        baseline: !args.no_baseline,
        chart: chart.clone(),
    };
    let results = bench::bench(&lab, &options)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", bench::render(&results, &chart, args.max_loss));
        if args.trials {
            print!("\nSEARCH TRIALS\n{}", bench::render_trials(&results));
        }
    }
    Ok(())
}

/// `lab impair`: changes a link's impairment in the running lab, and says what it is now.
fn impair_link(which: LinkChoice, settings: &ImpairArgs, clear: bool) -> anyhow::Result<()> {
    let LinkChoice {
        link,
        lab,
        direction,
    } = which;
    let running = lab.pick()?;
    let new = impairment::changed(
        &running,
        &link,
        direction.into(),
        &settings.impairment(),
        clear,
    )?;
    impairment::apply(&new)?;
    let changed = impairment::find_link(&new, &link)?;
    println!("lab {} link {}:", new.name, changed.uid);
    for line in impairment::describe(changed) {
        println!("  {line}");
    }
    Ok(())
}

/// `lab capture`: a link's frames, from its first end's node, to pcapng.
fn capture_link(which: LinkChoice, output: &CaptureArgs) -> anyhow::Result<()> {
    let LinkChoice {
        link,
        lab,
        direction,
    } = which;
    output.check_destination()?;
    let running = lab.pick()?;
    let found = impairment::find_link(&running, &link)?;
    let a = &found.endpoints[0];
    let node = &running.pods[&a.pod];
    let socket = lab::paths::LabPaths::of(&running).node_socket(node);
    let call = CaptureCall {
        namespace: running.name.clone(),
        pod: a.pod.clone(),
        link_uid: Some(found.uid),
        ifname: None,
        direction: match direction {
            LinkDirection::AToB => CaptureDirection::Egress,
            LinkDirection::BToA => CaptureDirection::Ingress,
            LinkDirection::Both => CaptureDirection::Both,
        },
        snaplen: 0,
    };
    output.capture(&socket, call)
}
