//! `xwired`'s configuration file: what it may say, and its checks, are the model's
//! (`xwire_model::config`); reading the file is here.

use std::path::Path;

pub(crate) use xwire_model::config::*;

/// Reads and checks the configuration at `path`.
pub fn load(path: &Path) -> Result<DaemonConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        cause: source,
    })?;
    DaemonConfig::parse(&text, path)
}
