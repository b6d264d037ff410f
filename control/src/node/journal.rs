//! What a transaction has done so far, so that a failure can undo exactly that, in
//! reverse (CNI ADD, and a wire set up on a peer's word).

use xwire_fastpath::link_table::PortId;

use xwire_proto::WireId;

use crate::store::{AttachmentKey, EndKey, WireRecord};

/// One step that was taken, and so one to undo.
#[derive(Debug)]
pub enum Step {
    /// An interface was made in the namespace at `netns` (a path; empty: the node's),
    /// with the alias that marks it as xwire's.
    Interface {
        netns: String,
        name: String,
        alias: String,
    },
    /// A fast-path port was opened for the wire end `key`, on the worker of `wire`.
    Port {
        key: EndKey,
        wire: WireId,
        id: PortId,
    },
    /// A remote link was added to the fast path.
    RemoteLink { wire: WireId },
    /// A wire record was written over `previous` (`None`: there was none).
    Wire {
        key: EndKey,
        previous: Option<Box<WireRecord>>,
    },
    /// An attachment record was written.
    Attachment { key: AttachmentKey },
}

#[derive(Debug, Default)]
pub(crate) struct Journal {
    steps: Vec<Step>,
}

impl Journal {
    pub fn record(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// The steps, last first: the order to undo them in.
    pub(crate) fn into_undo_order(self) -> impl Iterator<Item = Step> {
        self.steps.into_iter().rev()
    }
}
