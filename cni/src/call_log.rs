//! One JSON line per plugin call (command, pod, container, result or error with its
//! code, time taken) in a file on the node, so that a pod stuck in ContainerCreating can
//! be explained from the node without the runtime's logs. The file is bounded: past
//! `MAX_BYTES` it becomes `<file>.1` (replacing the older one) and a new file starts.
//! Logging never changes a call's outcome: a log that cannot be written is skipped.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use xwire_proto::local::CniError;

/// Where calls are logged unless the configuration's `logFile` says otherwise (an empty
/// `logFile` turns the log off).
pub(crate) const DEFAULT_LOG_FILE: &str = "/var/log/xwire/cni.log";
/// The most one file holds before it is rotated: two files, 20 MiB at most in all.
pub(crate) const MAX_BYTES: u64 = 10 << 20;

/// The log file a call's raw configuration names.
pub(crate) fn log_file(config: &[u8]) -> Option<String> {
    let named = serde_json::from_slice::<Value>(config)
        .ok()
        .and_then(|c| c.get("logFile").and_then(Value::as_str).map(str::to_owned));
    match named {
        Some(path) if path.is_empty() => None,
        Some(path) => Some(path),
        None => Some(DEFAULT_LOG_FILE.to_owned()),
    }
}

/// The line for one call.
pub fn entry(env: &[(String, String)], took: Duration, outcome: Result<(), &CniError>) -> Value {
    let var = |name: &str| {
        env.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("")
    };
    // A malformed CNI_ARGS is the call's error to report; its log line still names the
    // call, with what the args would have given left empty.
    let args = crate::call::parse_args(var("CNI_ARGS")).unwrap_or_default();
    let arg = |key: &str| {
        args.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut line = json!({
        "time": now.as_secs_f64(),
        "command": var("CNI_COMMAND"),
        "pod": arg("K8S_POD_NAME"),
        "namespace": arg("K8S_POD_NAMESPACE"),
        "container_id": var("CNI_CONTAINERID"),
        "ifname": var("CNI_IFNAME"),
        "netns": var("CNI_NETNS"),
        "took_ms": took.as_millis() as u64,
    });
    match outcome {
        Ok(()) => line["result"] = json!("ok"),
        Err(e) => {
            line["result"] = json!("error");
            line["code"] = json!(e.code);
            line["msg"] = json!(e.msg);
            line["details"] = json!(e.details);
        }
    }
    line
}

/// Appends `line` to `path`, rotating first when the file would grow past `max_bytes`.
/// Calls run in parallel (one process each): an exclusive lock on the file orders the
/// check, the rotation and the write.
pub fn append(path: &Path, line: &Value, max_bytes: u64) -> std::io::Result<()> {
    let mut text = line.to_string();
    text.push('\n');
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| std::io::Error::from(e))?;
    let size = file.metadata()?.len();
    if size > 0 && size + text.len() as u64 > max_bytes {
        let mut rotated = path.as_os_str().to_owned();
        rotated.push(".1");
        std::fs::rename(path, &rotated)?;
        // Others waiting on the old file's lock find it renamed; they write to it, and
        // their line lands in `.1`: nothing is lost.
        drop(file);
        let fresh = OpenOptions::new().create(true).append(true).open(path)?;
        file = nix::fcntl::Flock::lock(fresh, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| std::io::Error::from(e))?;
    }
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Vec<(String, String)> {
        [
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_NETNS", "/var/run/netns/x"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=lab;K8S_POD_NAME=r1",
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    #[test]
    fn the_log_file_comes_from_the_configuration() {
        assert_eq!(log_file(b"{}").as_deref(), Some(DEFAULT_LOG_FILE));
        assert_eq!(log_file(b"not json").as_deref(), Some(DEFAULT_LOG_FILE));
        assert_eq!(
            log_file(br#"{"logFile": "/tmp/x.log"}"#).as_deref(),
            Some("/tmp/x.log")
        );
        assert_eq!(log_file(br#"{"logFile": ""}"#), None);
    }

    #[test]
    fn a_line_names_the_pod_and_the_error_with_its_code() {
        let e = CniError {
            code: 11,
            msg: "the xwire daemon is not reachable".into(),
            details: "/run/xwire/xwired.sock: ENOENT".into(),
        };
        let line = entry(&env(), Duration::from_millis(7), Err(&e));
        assert_eq!(line["command"], "ADD");
        assert_eq!(
            (line["namespace"].as_str(), line["pod"].as_str()),
            (Some("lab"), Some("r1"))
        );
        assert_eq!(line["result"], "error");
        assert_eq!(line["code"], 11);
        assert_eq!(line["took_ms"], 7);
        assert_eq!(entry(&env(), Duration::ZERO, Ok(()))["result"], "ok");
    }

    #[test]
    fn a_malformed_cni_args_leaves_the_pod_unnamed_in_the_line_and_nothing_else() {
        let mut env = env();
        env[4].1 = "K8S_POD_NAMESPACE=lab;garbage;K8S_POD_NAME=r1".into();
        let line = entry(&env, Duration::ZERO, Ok(()));
        assert_eq!(
            (line["namespace"].as_str(), line["pod"].as_str()),
            (Some(""), Some(""))
        );
        assert_eq!(line["command"], "ADD");
    }

    #[test]
    fn the_file_is_bounded_by_rotation() {
        let dir = std::env::temp_dir().join(format!("xwire-cni-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("nested/cni.log");
        let line = entry(&env(), Duration::ZERO, Ok(()));
        let one = line.to_string().len() as u64 + 1;
        for _ in 0..25 {
            append(&path, &line, one * 10).unwrap();
        }
        let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
        assert_eq!(lines(&path), 5);
        assert_eq!(lines(&dir.join("nested/cni.log.1")), 10);
        for text in std::fs::read_to_string(&path).unwrap().lines() {
            serde_json::from_str::<Value>(text).unwrap();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
