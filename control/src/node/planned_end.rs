//! The end an action works on, found in the pass's observation: its pod's attachment,
//! namespace, interfaces and link, and its wire record as observed.

use super::plan::{Desired, DesiredPod, Interfaces, Observed, PodNetns};
use super::reconcile::Observation;
use super::wiring::own_end;
use super::{ErrorKind, NodeError};
use crate::interfaces::{self, EndSettings};
use crate::netns::NetnsFd;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord};
use crate::topology::LinkSpec;

/// The attached pod of an action.
pub(super) fn pod_of<'a>(
    desired: &'a Desired,
    attachment: &AttachmentKey,
) -> Result<&'a DesiredPod, NodeError> {
    desired
        .pods
        .iter()
        .find(|p| p.attachment.has_key(attachment))
        .ok_or_else(|| NodeError::new(ErrorKind::Store, format!("no attachment {attachment}"), ""))
}

/// The wire record `key` as observed.
pub(super) fn record_of(observed: &Observed, key: &EndKey) -> Result<WireRecord, NodeError> {
    (observed.records.get(key).cloned())
        .ok_or_else(|| NodeError::new(ErrorKind::Store, format!("no record {key}"), ""))
}

/// Sets `end`'s pod interface as its link says, where it `differs` (an address missing,
/// say): only what is missing is added.
pub(super) fn configure_end(
    end: &PlannedEnd<'_>,
    differs: &[String],
) -> Result<Option<(String, String)>, NodeError> {
    let own = own_end(&end.pod.pod.namespace, &end.pod.pod.name, end.link);
    let present = end
        .interfaces
        .get(&own.name)
        .map(|i| i.addresses.clone())
        .unwrap_or_default();
    let settings = EndSettings {
        // Only what is missing is added; the alias is the end's already.
        address: own.address.filter(|a| !present.contains(a)),
        alias: None,
        ..own
    };
    interfaces::configure(end.ns, &settings).map_err(|e| {
        NodeError::new(
            ErrorKind::Interface,
            format!("configure {}", settings.name),
            e.to_string(),
        )
    })?;
    let change = format!("set as the topology says ({})", differs.join("; "));
    Ok(Some((end.key.to_string(), change)))
}

/// One end of an action: its pod's attachment, namespace and interfaces, and link.
pub(super) fn planned_end<'a>(
    observation: &'a Observation,
    attachment: &AttachmentKey,
    uid: u64,
) -> Result<PlannedEnd<'a>, NodeError> {
    let Observation {
        desired,
        observed,
        namespaces,
        ..
    } = observation;
    let pod = pod_of(desired, attachment)?;
    let missing = || {
        NodeError::new(
            ErrorKind::Store,
            format!("{attachment}: nothing observed"),
            "",
        )
    };
    let link = pod
        .links
        .iter()
        .find(|l| l.uid == uid)
        .ok_or_else(missing)?;
    let ns = namespaces.get(attachment).ok_or_else(missing)?;
    let Some(PodNetns::Open(interfaces)) = observed.pods.get(attachment) else {
        return Err(missing());
    };
    Ok(PlannedEnd {
        key: EndKey::new(&pod.attachment.pod.namespace, &pod.attachment.pod.name, uid),
        pod: &pod.attachment,
        ns,
        link,
        interfaces,
    })
}

/// An end an action works on, as observed.
pub(super) struct PlannedEnd<'a> {
    /// Its wire record's key.
    pub(super) key: EndKey,
    pub(super) pod: &'a AttachmentRecord,
    pub(super) ns: &'a NetnsFd,
    pub(super) link: &'a LinkSpec,
    pub(super) interfaces: &'a Interfaces,
}
