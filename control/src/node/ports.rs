//! The fast-path ports of a node's wire ends, by end, with the ends of each wire id at
//! hand: a new remote end checks that no wire of another namespace has its id, and a
//! look through every port for that was a tenth of a 10,000-pod lab's node threads.

use std::collections::HashMap;

use xwire_proto::WireId;

use super::OpenPort;
use crate::store::EndKey;

#[derive(Default)]
pub(super) struct Ports {
    by_end: HashMap<EndKey, OpenPort>,
    /// The ends whose port carries each wire id (a wire's two ends on one node, when it
    /// is switched here; else one).
    by_wire_id: HashMap<WireId, Vec<EndKey>>,
}

impl Ports {
    pub(super) fn insert(&mut self, key: EndKey, port: OpenPort) {
        let id = port.wire_id;
        if let Some(old) = self.by_end.insert(key.clone(), port) {
            self.forget_id(&key, old.wire_id);
        }
        self.by_wire_id.entry(id).or_default().push(key);
    }

    pub(super) fn remove(&mut self, key: &EndKey) -> Option<OpenPort> {
        let port = self.by_end.remove(key)?;
        self.forget_id(key, port.wire_id);
        Some(port)
    }

    fn forget_id(&mut self, key: &EndKey, id: WireId) {
        if let Some(ends) = self.by_wire_id.get_mut(&id) {
            ends.retain(|end| end != key);
            if ends.is_empty() {
                self.by_wire_id.remove(&id);
            }
        }
    }

    pub(super) fn get(&self, key: &EndKey) -> Option<&OpenPort> {
        self.by_end.get(key)
    }

    /// For what a port's owner changes after it opened (its impairment); its wire and
    /// wire id stay what they were opened with.
    pub(super) fn get_mut(&mut self, key: &EndKey) -> Option<&mut OpenPort> {
        self.by_end.get_mut(key)
    }

    pub(super) fn contains_key(&self, key: &EndKey) -> bool {
        self.by_end.contains_key(key)
    }

    pub(super) fn keys(&self) -> impl Iterator<Item = &EndKey> {
        self.by_end.keys()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&EndKey, &OpenPort)> {
        self.by_end.iter()
    }

    /// An open port of a wire of a namespace other than `namespace` whose id is `id`.
    pub(super) fn other_namespace_with_id(&self, id: WireId, namespace: &str) -> Option<&OpenPort> {
        self.by_wire_id
            .get(&id)?
            .iter()
            .filter_map(|key| self.by_end.get(key))
            .find(|port| port.wire.namespace != namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_fastpath::link_table::PortId;
    use xwire_proto::control::WireKey;

    fn port(namespace: &str, uid: u64, id: u64) -> OpenPort {
        OpenPort {
            id: PortId(0),
            wire: WireKey {
                namespace: namespace.into(),
                link_uid: uid,
            },
            wire_id: WireId(id),
            pod: "p".into(),
            impairment: None,
        }
    }

    #[test]
    fn a_wire_id_is_found_in_another_namespace_until_its_port_goes() {
        let mut ports = Ports::default();
        let a = EndKey::from("lab-a/r1/1");
        let b = EndKey::from("lab-b/r1/9");
        ports.insert(a.clone(), port("lab-a", 1, 7));
        assert!(ports.other_namespace_with_id(WireId(7), "lab-a").is_none());
        assert_eq!(
            ports
                .other_namespace_with_id(WireId(7), "lab-b")
                .map(|p| p.wire.link_uid),
            Some(1)
        );
        ports.insert(b.clone(), port("lab-b", 9, 7));
        assert!(ports.other_namespace_with_id(WireId(7), "lab-c").is_some());
        ports.remove(&a);
        assert!(ports.other_namespace_with_id(WireId(7), "lab-b").is_none());
        // An end opened again with another id is no longer found under its old one.
        ports.insert(b.clone(), port("lab-b", 9, 8));
        assert!(ports.other_namespace_with_id(WireId(7), "lab-a").is_none());
        assert!(ports.other_namespace_with_id(WireId(8), "lab-a").is_some());
        ports.remove(&b);
        assert!(ports.by_wire_id.is_empty());
    }
}
