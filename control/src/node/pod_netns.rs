//! A pod's namespace, opened again from what was recorded at its ADD: the path, and which
//! namespace the path named then. A path that has come to name another namespace is an
//! error that says the pod's namespace is gone (`NetnsError::is_gone`).

use std::path::Path;

use xwire_netns::{NetnsError, NetnsFd};

use crate::store::{AttachmentRecord, WireRecord};

impl AttachmentRecord {
    /// Opens the pod's namespace, if the path still names the one recorded.
    pub(crate) fn open_netns(&self) -> Result<NetnsFd, NetnsError> {
        NetnsFd::open_recorded(Path::new(&self.netns), self.netns_id)
    }
}

impl WireRecord {
    /// Opens the local pod's namespace, if the path still names the one recorded.
    pub(crate) fn open_local_pod_netns(&self) -> Result<NetnsFd, NetnsError> {
        NetnsFd::open_recorded(Path::new(&self.local_pod_netns), self.local_pod_netns_id)
    }
}
