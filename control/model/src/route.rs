//! What a Topology and the daemon's configuration say of a pod's routes: plain data.

use std::net::IpAddr;

/// Router mode's settings (`[routing]` in xwired.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicySettings {
    /// The table of the pod's first interface with an address; the next one's is one
    /// more, and so on, in the order of the links' uids.
    pub first_table: u32,
    /// The priority of the `from ADDRESS lookup TABLE` rules (below the main table's
    /// 32766, so that they are consulted first).
    pub rule_priority: u32,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            first_table: 1000,
            rule_priority: 1000,
        }
    }
}

/// A static route the pod's Topology asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticRoute {
    pub dst: (IpAddr, u8),
    pub via: IpAddr,
}

/// `address/prefix` with the host bits cleared.
pub fn network(address: IpAddr, prefix: u8) -> (IpAddr, u8) {
    let max = if address.is_ipv4() { 32 } else { 128 };
    let net = ipnet::IpNet::new(address, prefix.min(max)).expect("a prefix length in range");
    (net.network(), prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn network_clears_host_bits() {
        assert_eq!(network(ip("10.1.2.3"), 8), (ip("10.0.0.0"), 8));
        assert_eq!(network(ip("10.1.2.3"), 0), (ip("0.0.0.0"), 0));
        assert_eq!(network(ip("10.1.2.3"), 32), (ip("10.1.2.3"), 32));
        assert_eq!(network(ip("2001:db8::7"), 64), (ip("2001:db8::"), 64));
    }
}
