//! Files that hold secrets (node keys): written so that they never exist, not even for
//! a moment, with a mode wider than the owner's.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to `path` with mode 0600 from its creation on: into a new file beside
/// it, created with that mode, then renamed over `path` (which also replaces an older
/// file whose mode was wider).
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} names no file", path.display()),
        )
    })?;
    let mut temporary = name.to_owned();
    temporary.push(format!(".new-{}", std::process::id()));
    let temporary = path.with_file_name(temporary);
    let _ = std::fs::remove_file(&temporary);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut file| {
            file.write_all(bytes)?;
            file.sync_all()
        })
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}
