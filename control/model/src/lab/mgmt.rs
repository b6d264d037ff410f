//! A lab's management network as the lab's record keeps it: the pods' interface, the two
//! subnets, and each pod's host number, from which its addresses follow (the host has
//! `.1`). Making the bridges and interfaces is the lab's (`xwire-lab`'s `mgmt.rs`).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

use crate::topology::parse_cidr;

/// An address with a prefix length.
pub type Cidr = (IpAddr, u8);

/// The pods' management interface unless the lab file names another.
pub const DEFAULT_INTERFACE: &str = "eth0";
/// The first host number a pod gets (1 is the host's).
pub const FIRST_POD_HOST: u32 = 2;

/// A lab's management network, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mgmt {
    /// The pods' management interface.
    pub interface: String,
    /// `None` until `lab up` picks one (when the file gives none).
    pub ipv4_subnet: Option<String>,
    pub ipv6_subnet: Option<String>,
    /// Each pod's host number in both subnets.
    pub hosts: BTreeMap<String, u32>,
}

/// A pod's management addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Addresses {
    pub ipv4: String,
    pub ipv6: String,
}

impl Mgmt {
    /// Host numbers for `pods`: those in `previous` kept, the others the smallest free.
    pub fn assign(&mut self, pods: impl Iterator<Item = String>, previous: Option<&Mgmt>) {
        let pods: Vec<String> = pods.collect();
        let mut hosts = BTreeMap::new();
        if let Some(previous) = previous {
            for pod in &pods {
                if let Some(&n) = previous.hosts.get(pod) {
                    hosts.insert(pod.clone(), n);
                }
            }
        }
        // The numbers taken, as a set: a look through every pod's number for each new
        // pod was quadratic (a 10,000-pod lab's file took seconds to read).
        let mut taken: std::collections::BTreeSet<u32> = hosts.values().copied().collect();
        let mut next = FIRST_POD_HOST;
        for pod in pods {
            if hosts.contains_key(&pod) {
                continue;
            }
            while taken.contains(&next) {
                next += 1;
            }
            taken.insert(next);
            hosts.insert(pod, next);
        }
        self.hosts = hosts;
    }

    /// The IPv4 and IPv6 subnets, once the lab has them.
    pub fn subnets(&self) -> Result<(Cidr, Cidr), String> {
        let v4 = self
            .ipv4_subnet
            .as_deref()
            .ok_or("no management IPv4 subnet yet")?;
        let v6 = self
            .ipv6_subnet
            .as_deref()
            .ok_or("no management IPv6 subnet yet")?;
        Ok((parse_cidr(v4)?, parse_cidr(v6)?))
    }

    /// The addresses of host number `n`, with the subnets' prefix lengths.
    pub fn host(&self, n: u32) -> Result<(Cidr, Cidr), String> {
        let ((v4, p4), (v6, p6)) = self.subnets()?;
        Ok(((nth(v4, n), p4), (nth(v6, n), p6)))
    }

    pub fn pod_addresses(&self, pod: &str) -> Option<Addresses> {
        let n = *self.hosts.get(pod)?;
        let ((v4, _), (v6, _)) = self.host(n).ok()?;
        Some(Addresses {
            ipv4: v4.to_string(),
            ipv6: v6.to_string(),
        })
    }

    pub fn host_addresses(&self) -> Option<Addresses> {
        let ((v4, _), (v6, _)) = self.host(1).ok()?;
        Some(Addresses {
            ipv4: v4.to_string(),
            ipv6: v6.to_string(),
        })
    }
}

/// How many host numbers a subnet of this family and prefix length has for pods.
pub fn room(subnet: (IpAddr, u8)) -> u64 {
    let bits = match subnet.0 {
        IpAddr::V4(_) => 32 - u32::from(subnet.1),
        IpAddr::V6(_) => (128 - u32::from(subnet.1)).min(32),
    };
    // The network and broadcast numbers and the host's own are not the pods'.
    (1u64 << bits).saturating_sub(3)
}

fn nth(network: IpAddr, n: u32) -> IpAddr {
    match network {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) + n)),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) + u128::from(n))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_keep_their_numbers_and_new_ones_take_the_smallest_free() {
        let mut before = Mgmt {
            interface: "eth0".into(),
            ipv4_subnet: Some("172.20.0.0/20".into()),
            ipv6_subnet: Some("fd78:7769:7265::/64".into()),
            hosts: BTreeMap::new(),
        };
        before.assign(["a", "b", "c"].map(String::from).into_iter(), None);
        assert_eq!(before.hosts["a"], 2);
        assert_eq!(before.hosts["c"], 4);
        let mut after = before.clone();
        after.assign(["a", "c", "d"].map(String::from).into_iter(), Some(&before));
        assert_eq!(after.hosts["a"], 2);
        assert_eq!(after.hosts["c"], 4);
        assert_eq!(after.hosts["d"], 3, "b's number is free again");
        let addresses = after.pod_addresses("c").unwrap();
        assert_eq!(addresses.ipv4, "172.20.0.4");
        assert_eq!(addresses.ipv6, "fd78:7769:7265::4");
        assert_eq!(after.host_addresses().unwrap().ipv4, "172.20.0.1");
    }

    #[test]
    fn room_leaves_out_network_broadcast_and_host() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(room((ip("10.0.0.0"), 24)), 253);
        assert_eq!(room((ip("10.0.0.0"), 20)), 4093);
    }
}
