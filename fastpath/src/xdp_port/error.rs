//! Why a port could not be opened.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum PortError {
    #[error("interface name {0:?} is not valid")]
    BadName(String),
    #[error("no interface {0} in this network namespace")]
    NoSuchInterface(String),
    #[error("{ifname}: AF_XDP socket refused in {mode} mode: {cause}")]
    Socket {
        ifname: String,
        mode: &'static str,
        cause: io::Error,
    },
    #[error("{0}: another XDP program or AF_XDP socket holds this interface")]
    Busy(String),
    #[error("{0}: the UMEM already has rings on this interface (a port opened twice)")]
    AlreadyOpen(String),
    #[error("{ifname}: the worker cannot watch the port's socket: {cause}")]
    Unwatched { ifname: String, cause: nix::Error },
    #[error("{ifname}: cannot steer it through the switch: {reason}")]
    Unsteerable { ifname: String, reason: String },
    #[error("no room for another port (the worker has {0})")]
    NoRoom(usize),
    #[error("{ifname}: no UMEM of {frames} frames: {reason}")]
    Umem {
        ifname: String,
        frames: usize,
        reason: String,
    },
}

/// The port error for a socket xsk-rs could not make or bind.
pub(super) fn socket_error(
    ifname: &str,
    mode: &'static str,
    e: &dyn std::error::Error,
) -> PortError {
    let source = e
        .source()
        .and_then(|s| s.downcast_ref::<io::Error>())
        .map(|s| io::Error::new(s.kind(), s.to_string()))
        .unwrap_or_else(|| io::Error::other(e.to_string()));
    tracing::info!(ifname, mode, error = %source, "AF_XDP socket refused");
    if source.kind() == io::ErrorKind::ResourceBusy {
        PortError::Busy(ifname.into())
    } else {
        PortError::Socket {
            ifname: ifname.into(),
            mode,
            cause: source,
        }
    }
}
