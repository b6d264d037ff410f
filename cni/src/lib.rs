//! The xwire CNI plugin: reads a CNI call (environment and stdin), answers VERSION
//! itself, and asks the node daemon over the local API for everything else. It prints
//! the CNI result or error JSON and returns the process exit code. See README.md for the
//! configuration keys and the error codes.

#![forbid(unsafe_code)]

mod call;
pub(crate) mod call_log;
mod cleanup;
mod result;
pub mod veth_mode;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use xwire_proto::local::{codes, CniCall, CniError, Request, Response, StatusCall};

pub use call::{Command, Invocation};
pub use result::SUPPORTED_VERSIONS;

/// Where the daemon listens unless the configuration's `socket` says otherwise.
pub(crate) const DEFAULT_SOCKET: &str = "/run/xwire/xwired.sock";
/// How long a call may wait for the daemon: ADD of a pod with many links takes a while.
const DAEMON_TIMEOUT: Duration = Duration::from_secs(120);

/// What the plugin prints when it is run with no `CNI_COMMAND` (by a person).
pub(crate) const ABOUT: &str = concat!(
    "xwire CNI plugin v",
    env!("CARGO_PKG_VERSION"),
    ": wires pods together for network-emulation labs (CNI spec 0.3.0 to 1.1.0)"
);

/// Runs one plugin call; `env` is the process environment, `stdin` the configuration
/// (read only when the command needs it: VERSION answers without it, and no command at
/// all prints `ABOUT` to `err`). Returns the exit code (0, or 1 with an error printed).
pub fn run(
    env: &[(String, String)],
    stdin: &mut dyn Read,
    out: &mut impl Write,
    err: &mut impl Write,
) -> i32 {
    let command = env
        .iter()
        .find(|(k, _)| k == "CNI_COMMAND")
        .map(|(_, v)| v.as_str())
        .unwrap_or("");
    if command.is_empty() {
        // As the reference plugins do: a person who runs the binary learns what it is.
        let _ = writeln!(err, "{ABOUT}");
        return 0;
    }
    let mut config = Vec::new();
    if command != "VERSION" {
        // One byte over the limit is enough to know: a runtime (or anyone who can run
        // the plugin) cannot make it hold more than that in memory.
        let read = stdin
            .take(xwire_proto::local::MAX_LOCAL_BODY as u64 + 1)
            .read_to_end(&mut config);
        let refusal = match read {
            Err(e) => Some(CniError {
                code: codes::IO_FAILURE,
                msg: "cannot read the network configuration on stdin".into(),
                details: e.to_string(),
            }),
            Ok(n) if n > xwire_proto::local::MAX_LOCAL_BODY => Some(CniError {
                code: codes::INVALID_CONFIG,
                msg: "the network configuration on stdin is too large".into(),
                details: format!(
                    "over {} bytes, the most the daemon takes in one call",
                    xwire_proto::local::MAX_LOCAL_BODY
                ),
            }),
            Ok(_) => None,
        };
        if let Some(refusal) = refusal {
            return print_error(out, call::newest_version(), &refusal);
        }
    }
    let started = std::time::Instant::now();
    let (version, outcome) = match Invocation::parse(env, &config) {
        Ok(invocation) => (invocation.cni_version.clone(), execute(&invocation)),
        Err((version, e)) => (version, Err(e)),
    };
    if command != "VERSION" {
        if let Some(path) = call_log::log_file(&config) {
            let line = call_log::entry(env, started.elapsed(), outcome.as_ref().map(|_| ()));
            // The call's answer matters more than its log line.
            let _ = call_log::append(std::path::Path::new(&path), &line, call_log::MAX_BYTES);
        }
    }
    match outcome {
        Ok(None) => 0,
        Ok(Some(result)) => {
            let _ = writeln!(out, "{result}");
            0
        }
        Err(e) => print_error(out, version, &e),
    }
}

fn print_error(out: &mut impl Write, version: String, e: &CniError) -> i32 {
    let error = json!({
        "cniVersion": version,
        "code": e.code,
        "msg": e.msg,
        "details": e.details,
    });
    let _ = writeln!(out, "{error}");
    1
}

fn execute(invocation: &Invocation) -> Result<Option<Value>, CniError> {
    let socket = PathBuf::from(&invocation.socket);
    match &invocation.command {
        Command::Version => Ok(Some(json!({
            "cniVersion": invocation.cni_version,
            "supportedVersions": SUPPORTED_VERSIONS,
        }))),
        Command::Add(call) => add(invocation, &socket, call).map(Some),
        Command::Del(call) => del(invocation, &socket, call),
        Command::Check(call) => check(invocation, &socket, call),
        Command::Status(config) => {
            let request = Request::Status(StatusCall {
                cni_version: invocation.cni_version.clone(),
                config: config.clone(),
            });
            match xwire_api_client::call(&socket, &request, DAEMON_TIMEOUT) {
                Ok(Response::Ok) => Ok(None),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(CniError {
                    code: codes::PLUGIN_NOT_AVAILABLE,
                    msg: "the xwire daemon is not running".into(),
                    details: format!("{}: {e}", socket.display()),
                }),
            }
        }
        Command::Gc(call) => {
            match xwire_api_client::call(&socket, &Request::Gc(call.clone()), DAEMON_TIMEOUT) {
                Ok(Response::Ok) => Ok(None),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(unreachable_daemon(&socket, e)),
            }
        }
    }
}

/// ADD: in veth mode the pod's veth to the node first (it is the plugin's own, undone
/// here if the daemon then fails), then the daemon's wires.
fn add(invocation: &Invocation, socket: &Path, call: &CniCall) -> Result<Value, CniError> {
    let veth = match &invocation.veth_mode {
        Some(mode) => Some(veth_add(mode, call, invocation.prev_result.as_ref())?),
        None => None,
    };
    let answered = xwire_api_client::call_about_netns(
        socket,
        &Request::Add(call.clone()),
        Path::new(&call.netns),
        DAEMON_TIMEOUT,
    );
    let mut result = match answered {
        Ok(Response::Added(added)) => Ok(result::merge(
            &invocation.cni_version,
            invocation.prev_result.as_ref(),
            &added,
            invocation.report_ips,
        )),
        Ok(Response::NotManaged) => Ok(result::pass_through(
            &invocation.cni_version,
            invocation.prev_result.as_ref(),
        )),
        Ok(other) => Err(unexpected(other)),
        Err(e) => Err(unreachable_daemon(socket, e)),
    };
    match (&mut result, veth) {
        (Ok(result), Some((mode, made))) => {
            result::add_veth(result, &mode.pod_interface, &call.netns, &made)
        }
        (Err(_), Some(_)) => {
            let _ = veth_mode::netlink::del(&call.container_id, &call.ifname);
        }
        _ => {}
    }
    result
}

fn del(invocation: &Invocation, socket: &Path, call: &CniCall) -> Result<Option<Value>, CniError> {
    let removed_veth = match &invocation.veth_mode {
        Some(_) => veth_mode::netlink::del(&call.container_id, &call.ifname),
        None => Ok(()),
    };
    match xwire_api_client::call(socket, &Request::Del(call.clone()), DAEMON_TIMEOUT) {
        Ok(Response::Ok) => removed_veth.map(|()| None).map_err(|e| CniError {
            code: codes::IO_FAILURE,
            msg: "veth mode: the pod's veth to the node could not be removed".into(),
            details: e,
        }),
        Ok(other) => Err(unexpected(other)),
        // A failing DEL blocks the pod's deletion for good: remove what is ours in the
        // pod's namespace and succeed; the daemon drops its records when it is back and
        // finds the namespace gone.
        Err(_) => {
            cleanup::remove_own_interfaces(&call.netns);
            Ok(None)
        }
    }
}

fn check(
    invocation: &Invocation,
    socket: &Path,
    call: &CniCall,
) -> Result<Option<Value>, CniError> {
    match xwire_api_client::call_about_netns(
        socket,
        &Request::Check(call.clone()),
        Path::new(&call.netns),
        DAEMON_TIMEOUT,
    ) {
        Ok(Response::Ok) => {}
        Ok(other) => return Err(unexpected(other)),
        Err(e) => return Err(unreachable_daemon(socket, e)),
    }
    match &invocation.veth_mode {
        Some(mode) => veth_check(mode, call, invocation.prev_result.as_ref()).map(|()| None),
        None => Ok(None),
    }
}

/// Veth mode's ADD: the pod's addresses from the primary plugin's result, the node's
/// from the configuration or its default route.
fn veth_add(
    mode: &veth_mode::VethMode,
    call: &xwire_proto::local::CniCall,
    prev_result: Option<&Value>,
) -> Result<(veth_mode::VethMode, veth_mode::netlink::Made), CniError> {
    let (pod_ips, node_addresses) = veth_addresses(mode, prev_result)?;
    let at = attachment(call, &pod_ips);
    let made = veth_mode::netlink::add(mode, &at, &node_addresses).map_err(|e| {
        veth_error(
            e,
            &call.netns,
            (
                codes::INTERFACE_FAILED,
                "veth mode: the pod's veth to the node could not be made",
            ),
        )
    })?;
    Ok((mode.clone(), made))
}

fn veth_check(
    mode: &veth_mode::VethMode,
    call: &xwire_proto::local::CniCall,
    prev_result: Option<&Value>,
) -> Result<(), CniError> {
    let (pod_ips, node_addresses) = veth_addresses(mode, prev_result)?;
    let at = attachment(call, &pod_ips);
    let problems = veth_mode::netlink::check(mode, &at, &node_addresses).map_err(|e| {
        veth_error(
            e,
            &call.netns,
            (
                codes::IO_FAILURE,
                "veth mode: reading the pod's veth to the node",
            ),
        )
    })?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(CniError {
        code: codes::CHECK_FAILED,
        msg: "veth mode: the pod's veth to the node is not as it should be".into(),
        details: problems.join("; "),
    })
}

/// The CNI error for what veth mode could not do: a `CNI_NETNS` that is no network
/// namespace is the caller's (code 4, as the daemon answers it), one that cannot be
/// opened for want of descriptors is for later (11), and the rest is `failed` (a code
/// and what could not be done).
fn veth_error(e: veth_mode::netlink::VethError, netns: &str, failed: (u32, &str)) -> CniError {
    use veth_mode::netlink::VethError;
    match e {
        VethError::Netns(e) if e.is_shortage() => CniError {
            code: codes::TRY_AGAIN_LATER,
            msg: format!("CNI_NETNS {netns} cannot be opened now"),
            details: e.to_string(),
        },
        VethError::Netns(e) => CniError {
            code: codes::INVALID_ENVIRONMENT,
            msg: format!("CNI_NETNS {netns} is not a network namespace"),
            details: e.to_string(),
        },
        VethError::Failed(details) => CniError {
            code: failed.0,
            msg: failed.1.into(),
            details,
        },
    }
}

fn attachment<'a>(
    call: &'a xwire_proto::local::CniCall,
    pod_ips: &'a [std::net::IpAddr],
) -> veth_mode::netlink::Attachment<'a> {
    veth_mode::netlink::Attachment {
        netns: &call.netns,
        container_id: &call.container_id,
        ifname: &call.ifname,
        pod_ips,
    }
}

fn veth_addresses(
    mode: &veth_mode::VethMode,
    prev_result: Option<&Value>,
) -> Result<(Vec<std::net::IpAddr>, Vec<std::net::IpAddr>), CniError> {
    let pod_ips = veth_mode::plan::pod_addresses(prev_result);
    if pod_ips.is_empty() {
        return Err(CniError {
            code: codes::INVALID_CONFIG,
            msg: "veth mode needs the pod's addresses: chain xwire after a plugin that gives some (prevResult.ips)".into(),
            details: String::new(),
        });
    }
    let node_addresses = if mode.node_addresses.is_empty() {
        veth_mode::netlink::default_node_addresses().map_err(|e| CniError {
            code: codes::IO_FAILURE,
            msg: "veth mode: reading the node's addresses".into(),
            details: e,
        })?
    } else {
        mode.node_addresses.clone()
    };
    if node_addresses.is_empty() {
        return Err(CniError {
            code: codes::INVALID_CONFIG,
            msg: "veth mode: the node has no default route to take its address from: set vethMode.nodeAddresses".into(),
            details: String::new(),
        });
    }
    Ok((pod_ips, node_addresses))
}

fn unexpected(response: Response) -> CniError {
    match response {
        Response::Error(e) => e,
        other => CniError {
            code: codes::IO_FAILURE,
            msg: "the daemon gave an answer that does not fit the call".into(),
            details: format!("{other:?}"),
        },
    }
}

fn unreachable_daemon(socket: &std::path::Path, e: std::io::Error) -> CniError {
    CniError {
        code: codes::TRY_AGAIN_LATER,
        msg: "the xwire daemon is not reachable".into(),
        details: format!("{}: {e}", socket.display()),
    }
}
