//! Chaining into the node's primary CNI configuration, as decisions on plain data: which
//! file the runtime uses, and what that file becomes with xwire's entry added or taken
//! out. The installer (`installer.rs`) does the reading, writing and watching.

use serde_json::Value;

/// The extensions container runtimes (containerd, CRI-O through libcni) load from the
/// configuration directory.
pub(crate) const EXTENSIONS: [&str; 3] = [".conf", ".conflist", ".json"];

/// The plugin `type` xwire's entry has, and by which it is found again.
pub(crate) const PLUGIN_TYPE: &str = "xwire";

/// What to do with the directory's files.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No configuration file yet (the primary plugin has not written one): wait.
    NoFile,
    /// The file the runtime would use cannot be chained into; wait and log why. Never
    /// written over: it may be half-written by the primary plugin, or not ours to fix.
    Unusable { file: String, why: String },
    /// The file already ends with xwire's entry, as it should be.
    Chained { file: String },
    /// Write this content into the file.
    Write { file: String, content: Value },
}

/// The configuration files of a directory, as the runtime orders them: by name, those
/// with a known extension, hidden ones (temporary files) left out.
pub(crate) fn candidates<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut files: Vec<&str> = names
        .into_iter()
        .filter(|n| !n.starts_with('.') && EXTENSIONS.iter().any(|e| n.ends_with(e)))
        .collect();
    files.sort_unstable();
    files
}

/// Decides what `insert` needs, given the first configuration file by name and its bytes.
/// `entry` is xwire's plugin entry (its `type` is `PLUGIN_TYPE`).
pub fn insert(file: Option<(&str, &[u8])>, entry: &Value) -> Decision {
    let Some((file, bytes)) = file else {
        return Decision::NoFile;
    };
    let unusable = |why: String| Decision::Unusable {
        file: file.to_owned(),
        why,
    };
    let mut list = match parse_list(file, bytes) {
        Ok(list) => list,
        Err(why) => return unusable(why),
    };
    let plugins = list["plugins"]
        .as_array_mut()
        .expect("checked by parse_list");
    let ours: Vec<usize> = positions(plugins);
    match ours.as_slice() {
        [only] if *only == plugins.len() - 1 && plugins[*only] == *entry => {
            return Decision::Chained {
                file: file.to_owned(),
            }
        }
        // An older or misplaced entry of ours: replaced by the current one, last.
        _ => {
            for at in ours.into_iter().rev() {
                plugins.remove(at);
            }
            plugins.push(entry.clone());
        }
    }
    Decision::Write {
        file: file.to_owned(),
        content: list,
    }
}

/// The file's content with xwire's entries taken out, or `None` when it has none (or
/// is not a configuration list: then it is not ours to touch).
pub fn remove(file: &str, bytes: &[u8]) -> Option<Value> {
    let mut list = parse_list(file, bytes).ok()?;
    let plugins = list["plugins"].as_array_mut()?;
    let ours = positions(plugins);
    if ours.is_empty() {
        return None;
    }
    for at in ours.into_iter().rev() {
        plugins.remove(at);
    }
    Some(list)
}

fn positions(plugins: &[Value]) -> Vec<usize> {
    plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| p.get("type").and_then(Value::as_str) == Some(PLUGIN_TYPE))
        .map(|(at, _)| at)
        .collect()
}

/// A configuration list the runtime would load: a JSON object with a `name`, a
/// `cniVersion` and a non-empty `plugins` array of objects that each have a `type`.
fn parse_list(file: &str, bytes: &[u8]) -> Result<Value, String> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON ({e}); waiting for it"))?;
    let Some(object) = value.as_object() else {
        return Err("not a JSON object".into());
    };
    let Some(plugins) = object.get("plugins") else {
        return Err(if file.ends_with(".conflist") {
            "a .conflist without plugins".into()
        } else {
            "a single-plugin configuration, not a list; xwire chains only into a \
             configuration list (plugins: [...])"
                .into()
        });
    };
    let Some(plugins) = plugins.as_array().filter(|p| !p.is_empty()) else {
        return Err("plugins is not a non-empty array".into());
    };
    if let Some(at) = plugins
        .iter()
        .position(|p| p.get("type").and_then(Value::as_str).is_none())
    {
        return Err(format!("plugin {at} has no type"));
    }
    for field in ["name", "cniVersion"] {
        if object.get(field).and_then(Value::as_str).is_none() {
            return Err(format!("no {field}"));
        }
    }
    if plugins
        .first()
        .and_then(|p| p.get("type"))
        .and_then(Value::as_str)
        == Some(PLUGIN_TYPE)
    {
        return Err("xwire is the first plugin; it is chained after a primary plugin".into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> Value {
        json!({"type": "xwire", "socket": "/run/xwire/xwired.sock"})
    }

    fn kindnet() -> Value {
        json!({"cniVersion": "0.3.1", "name": "kindnet", "plugins": [
            {"type": "ptp", "ipMasq": false, "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
             "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.244.0.0/24"}]]}, "mtu": 1500},
            {"type": "portmap", "capabilities": {"portMappings": true}}]})
    }

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec_pretty(v).unwrap()
    }

    #[test]
    fn the_runtime_order_is_by_name_over_known_extensions() {
        let names = [
            "99-x.conf",
            "10-kindnet.conflist",
            ".10-a.conflist.tmp",
            "README",
            "05-b.json",
        ];
        assert_eq!(
            candidates(names),
            ["05-b.json", "10-kindnet.conflist", "99-x.conf"]
        );
    }

    #[test]
    fn xwire_goes_last_and_a_second_insert_changes_nothing() {
        let Decision::Write { file, content } =
            insert(Some(("10-kindnet.conflist", &bytes(&kindnet()))), &entry())
        else {
            panic!("expected a write");
        };
        assert_eq!(file, "10-kindnet.conflist");
        let plugins = content["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 3);
        assert_eq!(plugins[2], entry());
        assert_eq!(plugins[..2], kindnet()["plugins"].as_array().unwrap()[..]);
        assert_eq!(
            insert(Some((&file, &bytes(&content))), &entry()),
            Decision::Chained { file: file.clone() }
        );
        // Taking it out gives back the primary's file exactly, unknown fields and all.
        assert_eq!(remove(&file, &bytes(&content)), Some(kindnet()));
        assert_eq!(remove(&file, &bytes(&kindnet())), None);
    }

    #[test]
    fn an_old_or_misplaced_entry_is_replaced_by_one_at_the_end() {
        let mut list = kindnet();
        let plugins = list["plugins"].as_array_mut().unwrap();
        plugins.insert(1, json!({"type": "xwire", "socket": "/old.sock"}));
        let Decision::Write { content, .. } = insert(Some(("a.conflist", &bytes(&list))), &entry())
        else {
            panic!("expected a write");
        };
        let plugins = content["plugins"].as_array().unwrap();
        assert_eq!(plugins.iter().filter(|p| p["type"] == "xwire").count(), 1);
        assert_eq!(plugins.last(), Some(&entry()));
    }

    #[test]
    fn files_that_cannot_be_chained_into_are_left_alone_with_the_reason() {
        let cases: [(&str, &[u8], &str); 6] = [
            (
                "a.conflist",
                b"{\"cniVersion\": \"1.0.0\", \"plug",
                "not JSON",
            ),
            ("a.conflist", b"[1]", "not a JSON object"),
            (
                "a.conf",
                br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#,
                "single-plugin",
            ),
            (
                "a.conflist",
                br#"{"cniVersion":"1.0.0","name":"n","plugins":[]}"#,
                "non-empty",
            ),
            (
                "a.conflist",
                br#"{"cniVersion":"1.0.0","plugins":[{"type":"ptp"}]}"#,
                "no name",
            ),
            (
                "a.conflist",
                br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"xwire"}]}"#,
                "first plugin",
            ),
        ];
        for (file, content, why) in cases {
            match insert(Some((file, content)), &entry()) {
                Decision::Unusable { why: got, .. } => assert!(got.contains(why), "{got}"),
                other => panic!("{why}: {other:?}"),
            }
            assert_eq!(remove(file, content), None);
        }
        assert_eq!(insert(None, &entry()), Decision::NoFile);
    }
}
