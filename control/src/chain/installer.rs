//! The I/O half of chaining: installs the plugin binary, writes xwire's entry into the
//! runtime's configuration list, keeps it there while the primary plugin rewrites its
//! file (kindnet does, on every start), and takes out exactly what it added on uninstall.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::conflist::{self, Decision};
pub use xwire_model::config::ChainConfig;

/// What `ensure` found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    NoFile,
    /// The file that was not chained into, and why.
    Waiting {
        file: String,
        why: String,
    },
    AlreadyChained(String),
    Chained(String),
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {cause}")]
pub struct ChainError {
    path: PathBuf,
    cause: std::io::Error,
}

fn at(path: &Path) -> impl FnOnce(std::io::Error) -> ChainError + '_ {
    move |source| ChainError {
        path: path.to_owned(),
        cause: source,
    }
}

pub struct Installer {
    config: ChainConfig,
    entry: Value,
    /// Whether this installer put the plugin binary in place (and so takes it out).
    installed_binary: bool,
}

impl Installer {
    pub fn new(config: ChainConfig) -> Installer {
        let mut entry = config.entry.clone();
        entry.insert("type".into(), Value::from(conflist::PLUGIN_TYPE));
        Installer {
            config,
            entry: Value::Object(entry),
            installed_binary: false,
        }
    }

    pub fn conf_dir(&self) -> &Path {
        &self.config.conf_dir
    }

    /// Copies the plugin binary into `bin_dir` unless the same bytes are there already;
    /// through a temporary file and a rename, so that the runtime never runs half a binary.
    pub(crate) fn install_plugin(&mut self) -> Result<bool, ChainError> {
        let Some(source) = self.config.plugin_binary.clone() else {
            return Ok(false);
        };
        let bytes = std::fs::read(&source).map_err(at(&source))?;
        let target = self.config.bin_dir.join(conflist::PLUGIN_TYPE);
        self.installed_binary = true;
        if std::fs::read(&target).is_ok_and(|old| old == bytes) {
            return Ok(false);
        }
        std::fs::create_dir_all(&self.config.bin_dir).map_err(at(&self.config.bin_dir))?;
        write_atomically(&target, &bytes, 0o755)?;
        Ok(true)
    }

    /// Puts xwire's entry at the end of the runtime's configuration list, if it is not
    /// there. Safe to run at any time and any number of times.
    pub fn ensure(&self) -> Result<Ensured, ChainError> {
        let dir = &self.config.conf_dir;
        let first = self.first_file()?;
        let read = match &first {
            Some(name) => Some((name.as_str(), read_file(&dir.join(name))?)),
            None => None,
        };
        let decision = conflist::insert(
            read.as_ref().map(|(name, bytes)| (*name, bytes.as_slice())),
            &self.entry,
        );
        Ok(match decision {
            Decision::NoFile => Ensured::NoFile,
            Decision::Unusable { file, why } => Ensured::Waiting { file, why },
            Decision::Chained { file } => Ensured::AlreadyChained(file),
            Decision::Write { file, content } => {
                // The bytes before xwire's entry, to be put back on uninstall.
                if let Some((_, bytes)) = &read {
                    let kept = self.original_path(&file);
                    let state_dir = self.state_dir();
                    std::fs::create_dir_all(&state_dir).map_err(at(&state_dir))?;
                    write_atomically(&kept, bytes, 0o600)?;
                }
                let path = dir.join(&file);
                write_json(&path, &content)?;
                Ensured::Chained(file)
            }
        })
    }

    /// Takes xwire's entry out of every configuration list in the directory, and the
    /// plugin binary if this installer put it there. The files it names were changed.
    /// A file that nothing else changed since xwire chained into it gets its bytes back
    /// exactly as they were; one that something else changed meanwhile keeps those
    /// changes, written out anew without xwire's entry (and the log says so).
    pub fn uninstall(&self) -> Result<Vec<String>, ChainError> {
        let dir = &self.config.conf_dir;
        let mut changed = Vec::new();
        for name in self.file_names()? {
            let path = dir.join(&name);
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            let kept = self.original_path(&name);
            let original = std::fs::read(&kept).ok();
            if let Some(content) = conflist::remove(&name, &bytes) {
                let unchanged = original.as_deref().filter(|original| {
                    serde_json::from_slice::<Value>(original).is_ok_and(|o| o == content)
                });
                match unchanged {
                    Some(original) => write_bytes(&path, original)?,
                    None => {
                        if original.is_some() {
                            tracing::warn!(file = %name, "the file changed since xwire chained into it: xwire's entry is taken out and the other changes kept, so its bytes are not the original's");
                        }
                        write_json(&path, &content)?;
                    }
                }
                changed.push(name);
            }
            if original.is_some() {
                std::fs::remove_file(&kept).map_err(at(&kept))?;
            }
        }
        if self.installed_binary {
            let target = self.config.bin_dir.join(conflist::PLUGIN_TYPE);
            match std::fs::remove_file(&target) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(at(&target)(e));
                }
                _ => {}
            }
        }
        Ok(changed)
    }

    /// Where the bytes of `file` before xwire chained into it are kept.
    fn original_path(&self, file: &str) -> PathBuf {
        self.state_dir().join(format!("{file}.original"))
    }

    fn state_dir(&self) -> PathBuf {
        self.config
            .state_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/xwire/chain"))
    }

    fn file_names(&self) -> Result<Vec<String>, ChainError> {
        let dir = &self.config.conf_dir;
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(at(dir)(e)),
        };
        let names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        Ok(conflist::candidates(names.iter().map(String::as_str))
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    fn first_file(&self) -> Result<Option<String>, ChainError> {
        Ok(self.file_names()?.into_iter().next())
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, ChainError> {
    std::fs::read(path).map_err(at(path))
}

fn write_json(path: &Path, content: &Value) -> Result<(), ChainError> {
    let mut bytes = serde_json::to_vec_pretty(content).expect("a JSON value serializes");
    bytes.push(b'\n');
    write_bytes(path, &bytes)
}

/// Writes `bytes` over the file at `path`, which keeps its mode (a runtime may want it
/// readable by others).
fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), ChainError> {
    let mode = std::fs::metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0o644);
    write_atomically(path, bytes, mode)
}

/// Writes into a hidden temporary file beside `path` (no extension a runtime loads),
/// then renames it over `path`: a reader sees the old file or the new one, never half.
fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ChainError> {
    use std::io::Write;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.xwire-{}", std::process::id()));
    let written = std::fs::File::create(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(at(path))
}

/// Keeps the entry in place until `stop` says so (or its sender goes), then uninstalls.
/// Changes in the directory wake it at once (inotify); it also looks every `recheck`,
/// in case an event was missed.
pub fn run(mut installer: Installer, stop: crossbeam_channel::Receiver<()>, recheck: Duration) {
    use notify::Watcher;
    let (wake, woken) = crossbeam_channel::bounded::<()>(1);
    let mut watcher = notify::recommended_watcher(move |_event| {
        let _ = wake.try_send(());
    })
    .map_err(|e| tracing::warn!("cannot watch the CNI configuration directory: {e}"))
    .ok();
    let mut watching = false;
    if let Err(e) = installer.install_plugin() {
        tracing::error!("installing the plugin binary: {e}");
    }
    let mut last = None;
    loop {
        if !watching {
            // The directory may not exist yet (the primary plugin makes it).
            watching = watcher.as_mut().is_some_and(|w| {
                w.watch(installer.conf_dir(), notify::RecursiveMode::NonRecursive)
                    .is_ok()
            });
        }
        let outcome = installer.ensure();
        let outcome = outcome.map_err(|e| e.to_string());
        if last.as_ref() != Some(&outcome) {
            match &outcome {
                Ok(Ensured::Chained(file)) => {
                    tracing::info!(%file, "xwire chained into the CNI configuration")
                }
                Ok(Ensured::AlreadyChained(file)) => tracing::info!(%file, "xwire is chained"),
                Ok(Ensured::NoFile) => {
                    tracing::info!(dir = %installer.conf_dir().display(), "no CNI configuration yet; waiting for the primary plugin's")
                }
                Ok(Ensured::Waiting { file, why }) => {
                    tracing::warn!(%file, "not chaining into this file: {why}")
                }
                Err(e) => tracing::error!("chaining: {e}"),
            }
        }
        // A chained file is rewritten only when it changes again.
        if let Ok(Ensured::Chained(file)) = &outcome {
            last = Some(Ok(Ensured::AlreadyChained(file.clone())));
        } else {
            last = Some(outcome);
        }
        let wait = if watching {
            recheck
        } else {
            recheck.min(Duration::from_secs(1))
        };
        crossbeam_channel::select! {
            recv(stop) -> _ => break,
            recv(woken) -> _ => {
                // A burst of events (a file written in steps) is one look.
                std::thread::sleep(Duration::from_millis(50));
                while woken.try_recv().is_ok() {}
            }
            default(wait) => {}
        }
    }
    drop(watcher);
    match installer.uninstall() {
        Ok(files) => tracing::info!(?files, "xwire taken out of the CNI configuration"),
        Err(e) => tracing::error!("taking xwire out of the CNI configuration: {e}"),
    }
}
