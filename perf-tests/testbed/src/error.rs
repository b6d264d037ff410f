use std::io;

/// What failed, and the operation that was under way.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{op}: {source}")]
    Io {
        op: String,
        #[source]
        source: io::Error,
    },
    #[error("{op}: {source}")]
    Netlink {
        op: String,
        #[source]
        source: rtnetlink::Error,
    },
    #[error("{op}: {detail}")]
    Invalid { op: String, detail: String },
}

impl Error {
    pub(crate) fn io(op: impl Into<String>, source: impl Into<io::Error>) -> Error {
        Error::Io {
            op: op.into(),
            source: source.into(),
        }
    }

    pub(crate) fn netlink(op: impl Into<String>, source: rtnetlink::Error) -> Error {
        Error::Netlink {
            op: op.into(),
            source,
        }
    }

    pub(crate) fn invalid(op: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Invalid {
            op: op.into(),
            detail: detail.into(),
        }
    }

    /// The netlink errno, if the kernel refused the request (e.g. `ENODEV`).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Netlink {
                source: rtnetlink::Error::NetlinkError(m),
                ..
            } => m.code.map(|c| -c.get()),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
