//! The variables containerlab expands in a topology file.
//!
//! First the environment's, over the whole file before it is read as YAML, as
//! containerlab does with its restricted envsubst: `$NAME` and `${NAME}` take the
//! variable's value; `${NAME:-DEFAULT}` and `${NAME:=DEFAULT}` the default when the
//! variable is unset or empty, `${NAME-DEFAULT}` and `${NAME=DEFAULT}` when it is unset;
//! a variable that is unset and has no default is left as written (a shell line in an
//! `exec` keeps its own `$HOME`), and so are positional ones (`$1`). `$$` is a `$`.
//!
//! Written here rather than taken from a crate: the crates that expand `${...}` either
//! fail or substitute nothing for an unset variable, and containerlab leaves it alone,
//! which is what keeps the shell lines of real files working.
//!
//! Then the node's own placeholders (`__clabNodeName__`, `__clabNodeDir__`, `__clabDir__`,
//! `__clabLabName__`), in the fields containerlab replaces them in: binds' host paths,
//! exec lines and the startup-config path.

use std::path::Path;

/// `text` with the environment's variables (as `lookup` gives them) expanded.
pub(super) fn expand_env(text: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        if let Some(inner) = after.strip_prefix('{') {
            if let Some(close) = inner.find('}') {
                if let Some(value) = braced(&inner[..close], &lookup) {
                    out.push_str(&value);
                    rest = &inner[close + 1..];
                    continue;
                }
            }
            out.push('$');
            rest = after;
            continue;
        }
        let name_len = name_length(after);
        match lookup(&after[..name_len]) {
            Some(value) if name_len > 0 => out.push_str(&value),
            _ => {
                out.push('$');
                out.push_str(&after[..name_len]);
            }
        }
        rest = &after[name_len..];
    }
    out.push_str(rest);
    out
}

/// The value of `${BODY}`, or `None` to leave it as written.
fn braced(body: &str, lookup: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let name_len = name_length(body);
    if name_len == 0 {
        return None;
    }
    let (name, operator) = body.split_at(name_len);
    let value = lookup(name);
    let (empty_counts, default) = match operator {
        "" => return value,
        _ if operator.starts_with(":-") || operator.starts_with(":=") => (true, &operator[2..]),
        _ if operator.starts_with('-') || operator.starts_with('=') => (false, &operator[1..]),
        _ => return None,
    };
    match value {
        Some(v) if !(empty_counts && v.is_empty()) => Some(v),
        _ => Some(default.to_owned()),
    }
}

/// The length of the variable name at the start of `text` (0 if there is none; a name
/// starting with a digit is positional, and not one).
fn name_length(text: &str) -> usize {
    if !text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return 0;
    }
    text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len())
}

/// A node's placeholders and their values.
pub(super) struct Placeholders {
    pairs: [(&'static str, String); 4],
}

impl Placeholders {
    /// For node `node` of lab `lab`, whose file is in `file_dir`: containerlab's lab
    /// directory is `clab-<lab>` beside the file, and a node's is inside it.
    pub(super) fn new(file_dir: &Path, lab: &str, node: &str) -> Placeholders {
        let lab_dir = file_dir.join(format!("clab-{lab}"));
        Placeholders {
            pairs: [
                ("__clabNodeName__", node.to_owned()),
                ("__clabNodeDir__", lab_dir.join(node).display().to_string()),
                ("__clabDir__", lab_dir.display().to_string()),
                ("__clabLabName__", format!("clab-{lab}")),
            ],
        }
    }

    pub(super) fn replace(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (placeholder, value) in &self.pairs {
            out = out.replace(placeholder, value);
        }
        out
    }

    /// A bind with its host path's placeholders replaced (only there, as containerlab).
    pub(super) fn replace_in_bind(&self, bind: &str) -> String {
        match bind.split_once(':') {
            Some((host, rest)) => format!("{}:{rest}", self.replace(host)),
            None => self.replace(bind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "IMAGE" => Some("frr:9".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn set_variables_expand_and_unset_ones_without_a_default_stay_as_written() {
        assert_eq!(expand_env("image: ${IMAGE}", env), "image: frr:9");
        assert_eq!(expand_env("image: $IMAGE.", env), "image: frr:9.");
        assert_eq!(
            expand_env("cd $HOME && ${NOPE}", env),
            "cd $HOME && ${NOPE}"
        );
        assert_eq!(expand_env("awk '{print $1}' $", env), "awk '{print $1}' $");
        assert_eq!(expand_env("cost $$5", env), "cost $5");
        assert_eq!(expand_env("${unclosed", env), "${unclosed");
    }

    #[test]
    fn defaults_apply_as_the_shell_applies_them() {
        assert_eq!(expand_env("${NOPE:=srl:24}", env), "srl:24");
        assert_eq!(expand_env("${NOPE:-a}${NOPE=b}${NOPE-c}", env), "abc");
        assert_eq!(expand_env("${EMPTY:=d}|${EMPTY=d}", env), "d|");
        assert_eq!(expand_env("${IMAGE:=other}", env), "frr:9");
        // An operator envsubst has and this does not: left alone, not guessed at.
        assert_eq!(expand_env("${IMAGE:?x}", env), "${IMAGE:?x}");
    }

    #[test]
    fn placeholders_name_the_node_and_containerlabs_lab_directory() {
        let p = Placeholders::new(Path::new("/labs"), "bgp", "r1");
        assert_eq!(
            p.replace_in_bind("__clabNodeDir__/conf:/etc/__clabNodeName__"),
            "/labs/clab-bgp/r1/conf:/etc/__clabNodeName__"
        );
        assert_eq!(
            p.replace("cat __clabDir__/x __clabLabName__ __clabNodeName__"),
            "cat /labs/clab-bgp/x clab-bgp r1"
        );
    }
}
