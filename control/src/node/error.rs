//! Why the node could not do what it was asked. Inside the daemon an error is a kind and
//! words; the CNI error code a caller sees is decided from the kind in one place
//! (`NodeError::to_cni`), at the local API's edge.

use xwire_proto::local::{codes, CniError};

use crate::store::StoreError;

/// What kind of failure it is, which decides the CNI code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The wire store could not be read or written.
    Store,
    /// A netlink or namespace operation on an interface failed.
    Interface,
    /// An interface of the name xwire would make is someone else's.
    InterfaceExists,
    /// The fast path (a port, a link, a peer) refused.
    Fastpath,
    /// The CNI call's environment is unusable (no namespace, say).
    InvalidEnvironment,
    /// The pod or container is attached already, otherwise.
    PodAlreadyAttached,
    /// Nothing is wrong with the call, but it cannot be answered now.
    TryAgainLater,
    /// CHECK or DEL of a container xwire does not know.
    UnknownContainer,
    /// CHECK found the pod not as its topology says.
    CheckFailed,
    /// A topology that is not valid.
    TopologyInvalid,
}

impl ErrorKind {
    /// The CNI error code for this kind.
    pub fn code(self) -> u32 {
        match self {
            ErrorKind::Store => codes::STORE_FAILED,
            ErrorKind::Interface => codes::INTERFACE_FAILED,
            ErrorKind::InterfaceExists => codes::INTERFACE_EXISTS,
            ErrorKind::Fastpath => codes::FASTPATH_FAILED,
            ErrorKind::InvalidEnvironment => codes::INVALID_ENVIRONMENT,
            ErrorKind::PodAlreadyAttached => codes::POD_ALREADY_ATTACHED,
            ErrorKind::TryAgainLater => codes::TRY_AGAIN_LATER,
            ErrorKind::UnknownContainer => codes::UNKNOWN_CONTAINER,
            ErrorKind::CheckFailed => codes::CHECK_FAILED,
            ErrorKind::TopologyInvalid => codes::TOPOLOGY_INVALID,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}: {details}")]
pub struct NodeError {
    pub kind: ErrorKind,
    pub msg: String,
    pub details: String,
}

impl NodeError {
    pub fn new(kind: ErrorKind, msg: impl Into<String>, details: impl Into<String>) -> NodeError {
        NodeError {
            kind,
            msg: msg.into(),
            details: details.into(),
        }
    }

    /// The answer a CNI caller gets.
    pub(crate) fn to_cni(&self) -> CniError {
        CniError {
            code: self.kind.code(),
            msg: self.msg.clone(),
            details: self.details.clone(),
        }
    }
}

impl From<StoreError> for NodeError {
    fn from(e: StoreError) -> NodeError {
        NodeError::new(ErrorKind::Store, "the wire store failed", e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_own_cni_code_and_the_words_carry_over() {
        let kinds = [
            ErrorKind::Store,
            ErrorKind::Interface,
            ErrorKind::InterfaceExists,
            ErrorKind::Fastpath,
            ErrorKind::InvalidEnvironment,
            ErrorKind::PodAlreadyAttached,
            ErrorKind::TryAgainLater,
            ErrorKind::UnknownContainer,
            ErrorKind::CheckFailed,
            ErrorKind::TopologyInvalid,
        ];
        let codes: std::collections::HashSet<u32> = kinds.iter().map(|k| k.code()).collect();
        assert_eq!(codes.len(), kinds.len());
        assert_eq!(
            ErrorKind::TryAgainLater.code(),
            11,
            "the CNI spec's own code"
        );
        let e = NodeError::new(ErrorKind::Fastpath, "no peer", "node n9");
        assert_eq!(
            e.to_cni(),
            CniError {
                code: codes::FASTPATH_FAILED,
                msg: "no peer".into(),
                details: "node n9".into()
            }
        );
        assert_eq!(e.to_string(), "no peer: node n9");
    }
}
