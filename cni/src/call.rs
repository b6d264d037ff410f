//! Reading a CNI call: the environment variables and the network configuration on
//! stdin, checked the way the spec asks, into a request for the daemon.

use serde_json::Value;
use xwire_proto::local::{codes, Attachment, CniCall, CniError, GcCall, PodRef};

use crate::result::{supports, version_at_least};
use crate::DEFAULT_SOCKET;

/// The pod namespace when neither the runtime nor the configuration gives one.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Add(CniCall),
    Del(CniCall),
    Check(CniCall),
    Version,
    Status(Value),
    Gc(GcCall),
}

/// A call, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub command: Command,
    /// The version to answer in: the configuration's.
    pub cni_version: String,
    pub socket: String,
    pub prev_result: Option<Value>,
    /// The configuration's `reportIPs`: list the links' addresses in the ADD result.
    pub report_ips: bool,
    /// The configuration's `vethMode`, when it has one.
    pub veth_mode: Option<crate::veth_mode::VethMode>,
}

/// The newest CNI version this plugin speaks: what it answers in when the call's own
/// version is unknown.
pub(crate) fn newest_version() -> String {
    crate::SUPPORTED_VERSIONS[crate::SUPPORTED_VERSIONS.len() - 1].to_owned()
}

fn error(code: u32, msg: impl Into<String>) -> CniError {
    CniError {
        code,
        msg: msg.into(),
        details: String::new(),
    }
}

impl Invocation {
    /// Reads a call. An error comes with the version to print it in (the
    /// configuration's when it could be read, else the newest supported).
    pub fn parse(env: &[(String, String)], stdin: &[u8]) -> Result<Invocation, (String, CniError)> {
        let var = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .unwrap_or("")
        };
        let command_name = var("CNI_COMMAND");
        if command_name == "VERSION" {
            // VERSION answers in the newest version, whatever stdin holds (a runtime may
            // send nothing at all).
            return Ok(Invocation {
                command: Command::Version,
                cni_version: newest_version(),
                socket: String::new(),
                prev_result: None,
                report_ips: false,
                veth_mode: None,
            });
        }
        let (config, version) = read_config(stdin)?;
        let fail = |e: CniError| (version.clone(), e);
        let options = Options::read(&config).map_err(fail)?;
        let veth_mode = crate::veth_mode::plan::parse(&config).map_err(fail)?;
        let command = command(command_name, env, &config, &version).map_err(fail)?;
        Ok(Invocation {
            command,
            cni_version: version,
            socket: options.socket,
            prev_result: options.prev_result,
            report_ips: options.report_ips,
            veth_mode,
        })
    }
}

/// The network configuration on stdin, and its version once the plugin speaks it: a
/// JSON object with string `cniVersion`, `name` and `type`. An error comes with the
/// version to print it in.
fn read_config(stdin: &[u8]) -> Result<(Value, String), (String, CniError)> {
    let config: Value = match serde_json::from_slice(stdin) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) => {
            return Err((
                newest_version(),
                error(
                    codes::DECODE_FAILURE,
                    "the network configuration is not a JSON object",
                ),
            ))
        }
        Err(e) => {
            return Err((
                newest_version(),
                CniError {
                    code: codes::DECODE_FAILURE,
                    msg: "the network configuration on stdin is not JSON".into(),
                    details: e.to_string(),
                },
            ))
        }
    };
    let Some(Value::String(version)) = config.get("cniVersion") else {
        return Err((
            newest_version(),
            error(
                codes::INVALID_CONFIG,
                "the configuration has no string \"cniVersion\"",
            ),
        ));
    };
    let version = version.clone();
    if !supports(&version) {
        let unsupported = CniError {
            code: codes::INCOMPATIBLE_VERSION,
            msg: format!("cniVersion {version} is not supported"),
            details: format!("supported: {}", crate::SUPPORTED_VERSIONS.join(", ")),
        };
        return Err((version, unsupported));
    }
    for key in ["name", "type"] {
        if !config.get(key).is_some_and(Value::is_string) {
            let missing = error(
                codes::INVALID_CONFIG,
                format!("the configuration has no string \"{key}\""),
            );
            return Err((version, missing));
        }
    }
    Ok((config, version))
}

/// The plugin's own keys of the configuration, and the chained result it was given.
struct Options {
    socket: String,
    prev_result: Option<Value>,
    report_ips: bool,
}

impl Options {
    fn read(config: &Value) -> Result<Options, CniError> {
        let socket = match config.get("socket") {
            None => DEFAULT_SOCKET.to_owned(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return Err(error(
                    codes::INVALID_CONFIG,
                    "\"socket\" must be the path of the daemon's socket",
                ))
            }
        };
        let prev_result = match config.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => Some(Value::Object(map.clone())),
            Some(_) => {
                return Err(error(
                    codes::INVALID_CONFIG,
                    "\"prevResult\" must be an object",
                ))
            }
        };
        let report_ips = match config.get("reportIPs") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(error(
                    codes::INVALID_CONFIG,
                    "\"reportIPs\" must be true or false",
                ))
            }
        };
        Ok(Options {
            socket,
            prev_result,
            report_ips,
        })
    }
}

/// The command `CNI_COMMAND` names, with what it needs of the environment and the
/// configuration, once the configuration's version allows it.
fn command(
    command_name: &str,
    env: &[(String, String)],
    config: &Value,
    version: &str,
) -> Result<Command, CniError> {
    match command_name {
        "ADD" | "DEL" | "CHECK" => {
            if command_name == "CHECK" && !version_at_least(version, "0.4.0") {
                return Err(error(
                    codes::INCOMPATIBLE_VERSION,
                    format!(
                        "CHECK needs cniVersion 0.4.0 or later, the configuration has {version}"
                    ),
                ));
            }
            let call = cni_call(command_name, env, config, version)?;
            Ok(match command_name {
                "ADD" => Command::Add(call),
                "DEL" => Command::Del(call),
                _ => Command::Check(call),
            })
        }
        "STATUS" | "GC" => {
            if !version_at_least(version, "1.1.0") {
                return Err(error(
                    codes::INCOMPATIBLE_VERSION,
                    format!(
                        "{command_name} needs cniVersion 1.1.0, the configuration has {version}"
                    ),
                ));
            }
            if command_name == "STATUS" {
                Ok(Command::Status(config.clone()))
            } else {
                Ok(Command::Gc(GcCall {
                    cni_version: version.to_owned(),
                    valid_attachments: valid_attachments(config)?,
                    config: config.clone(),
                }))
            }
        }
        "" => Err(error(codes::INVALID_ENVIRONMENT, "CNI_COMMAND is not set")),
        other => Err(error(
            codes::INVALID_ENVIRONMENT,
            format!("CNI_COMMAND {other:?} is not a CNI command"),
        )),
    }
}

fn cni_call(
    command: &str,
    env: &[(String, String)],
    config: &Value,
    version: &str,
) -> Result<CniCall, CniError> {
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let container_id = var("CNI_CONTAINERID");
    if container_id.is_empty() {
        return Err(error(
            codes::INVALID_ENVIRONMENT,
            "CNI_CONTAINERID is not set",
        ));
    }
    let ifname = var("CNI_IFNAME");
    if ifname.is_empty() {
        return Err(error(codes::INVALID_ENVIRONMENT, "CNI_IFNAME is not set"));
    }
    if let Err(why) = check_interface_name(&ifname) {
        return Err(error(
            codes::INVALID_ENVIRONMENT,
            format!("CNI_IFNAME {ifname:?} is not an interface name: {why}"),
        ));
    }
    let netns = var("CNI_NETNS");
    if netns.is_empty() && command != "DEL" {
        return Err(error(codes::INVALID_ENVIRONMENT, "CNI_NETNS is not set"));
    }
    let args = parse_args(&var("CNI_ARGS"))?;
    let arg = |key: &str| {
        args.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty())
    };
    let name = arg("K8S_POD_NAME").unwrap_or_default();
    if name.is_empty() && command != "DEL" {
        return Err(error(
            codes::INVALID_ENVIRONMENT,
            "CNI_ARGS has no K8S_POD_NAME: xwire cannot tell which pod this is",
        ));
    }
    let namespace = arg("K8S_POD_NAMESPACE")
        .or_else(|| arg("namespace"))
        .or_else(|| string_at(config, "/args/cni/namespace"))
        .or_else(|| string_at(config, "/namespace"))
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    Ok(CniCall {
        cni_version: version.to_owned(),
        container_id,
        netns,
        ifname,
        pod: PodRef { namespace, name },
        args,
        config: config.clone(),
    })
}

/// The kernel's rules for an interface name, which libcni checks too: a name that breaks
/// them fails later, half done, and one such as `../x` would name a path outside the
/// interface's own directory under /proc/sys.
fn check_interface_name(name: &str) -> Result<(), &'static str> {
    /// IFNAMSIZ less the terminating NUL.
    const MAX_LEN: usize = 15;
    if name.len() > MAX_LEN {
        return Err("longer than 15 bytes");
    }
    if name == "." || name == ".." {
        return Err("a name of a directory entry");
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err("it holds '/', ':' or white space");
    }
    Ok(())
}

fn string_at(config: &Value, pointer: &str) -> Option<String> {
    config
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `CNI_ARGS`: `K=V` pairs separated by `;`.
/// `CNI_ARGS` (`KEY=VALUE;KEY=VALUE`) as pairs: the one reading of it (the call log uses
/// it too).
pub(crate) fn parse_args(text: &str) -> Result<Vec<(String, String)>, CniError> {
    let mut args = Vec::new();
    for pair in text.split(';').filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(error(
                codes::INVALID_ENVIRONMENT,
                format!("CNI_ARGS: {pair:?} is not KEY=VALUE"),
            ));
        };
        args.push((key.to_owned(), value.to_owned()));
    }
    Ok(args)
}

/// GC's `cni.dev/valid-attachments` (or `cni.dev/attachments`, an earlier spelling).
/// A GC without the list is refused: read as "nothing is valid", it would remove every
/// attachment of the network.
fn valid_attachments(config: &Value) -> Result<Vec<Attachment>, CniError> {
    let list = config
        .get("cni.dev/valid-attachments")
        .or_else(|| config.get("cni.dev/attachments"));
    let Some(list) = list else {
        return Err(error(
            codes::INVALID_CONFIG,
            "GC needs cni.dev/valid-attachments (the attachments that stay); without it xwire removes nothing",
        ));
    };
    let bad = || {
        error(
            codes::INVALID_CONFIG,
            "cni.dev/valid-attachments must be a list of {containerID, ifname}",
        )
    };
    let items = list.as_array().ok_or_else(bad)?;
    items
        .iter()
        .map(|item| {
            let field = |k: &str| item.get(k).and_then(Value::as_str).map(str::to_owned);
            Ok(Attachment {
                container_id: field("containerID").ok_or_else(bad)?,
                ifname: field("ifname").ok_or_else(bad)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(command: &str, args: &str) -> Vec<(String, String)> {
        [
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_NETNS", "/run/netns/x"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", args),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn config(version: &str) -> Vec<u8> {
        json!({"cniVersion": version, "name": "labnet", "type": "xwire", "namespace": "lab"})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn the_pod_namespace_comes_from_the_runtime_then_the_configuration() {
        let parse = |args: &str| match Invocation::parse(&env("ADD", args), &config("1.0.0"))
            .unwrap()
            .command
        {
            Command::Add(call) => call.pod,
            other => panic!("{other:?}"),
        };
        assert_eq!(parse("IgnoreUnknown=1;K8S_POD_NAME=r1").namespace, "lab");
        assert_eq!(
            parse("K8S_POD_NAME=r1;K8S_POD_NAMESPACE=kne").namespace,
            "kne"
        );
        assert_eq!(parse("K8S_POD_NAME=r1;namespace=other").namespace, "other");
    }

    #[test]
    fn every_supported_version_is_accepted_and_others_refused() {
        for v in crate::SUPPORTED_VERSIONS {
            assert!(
                Invocation::parse(&env("ADD", "K8S_POD_NAME=r1"), &config(v)).is_ok(),
                "{v}"
            );
        }
        let (_, e) =
            Invocation::parse(&env("ADD", "K8S_POD_NAME=r1"), &config("0.2.0")).unwrap_err();
        assert_eq!(e.code, codes::INCOMPATIBLE_VERSION);
        let (_, e) =
            Invocation::parse(&env("CHECK", "K8S_POD_NAME=r1"), &config("0.3.1")).unwrap_err();
        assert_eq!(e.code, codes::INCOMPATIBLE_VERSION);
        let (_, e) = Invocation::parse(&env("STATUS", ""), &config("1.0.0")).unwrap_err();
        assert_eq!(e.code, codes::INCOMPATIBLE_VERSION);
    }

    #[test]
    fn an_interface_name_the_kernel_would_refuse_is_refused_first() {
        for bad in [
            "../x",
            "..",
            ".",
            "eth 1",
            "eth:1",
            "a/b",
            "sixteen-bytes-xx",
        ] {
            let mut e = env("ADD", "K8S_POD_NAME=r1");
            e.retain(|(k, _)| k != "CNI_IFNAME");
            e.push(("CNI_IFNAME".into(), bad.into()));
            let (_, err) = Invocation::parse(&e, &config("1.1.0")).unwrap_err();
            assert_eq!(err.code, codes::INVALID_ENVIRONMENT, "{bad}");
            assert!(
                err.msg.contains("not an interface name"),
                "{bad}: {}",
                err.msg
            );
        }
        let mut e = env("ADD", "K8S_POD_NAME=r1");
        e.retain(|(k, _)| k != "CNI_IFNAME");
        e.push(("CNI_IFNAME".into(), "fifteen-bytes-x".into()));
        assert!(Invocation::parse(&e, &config("1.1.0")).is_ok());
    }

    #[test]
    fn del_needs_neither_netns_nor_pod() {
        let mut e = env("DEL", "");
        e.retain(|(k, _)| k != "CNI_NETNS");
        assert!(matches!(
            Invocation::parse(&e, &config("1.1.0")).unwrap().command,
            Command::Del(_)
        ));
        let (_, err) = Invocation::parse(&env("ADD", ""), &config("1.1.0")).unwrap_err();
        assert_eq!(err.code, codes::INVALID_ENVIRONMENT);
    }

    #[test]
    fn gc_reads_both_spellings_of_the_attachment_list() {
        for key in ["cni.dev/valid-attachments", "cni.dev/attachments"] {
            let mut c: Value = serde_json::from_slice(&config("1.1.0")).unwrap();
            c[key] = json!([{"containerID": "c9", "ifname": "eth0"}]);
            let Command::Gc(gc) = Invocation::parse(&env("GC", ""), c.to_string().as_bytes())
                .unwrap()
                .command
            else {
                panic!()
            };
            assert_eq!(gc.valid_attachments[0].container_id, "c9");
        }
        let (_, missing) = Invocation::parse(&env("GC", ""), &config("1.1.0")).unwrap_err();
        assert_eq!(missing.code, codes::INVALID_CONFIG);
    }
}
