//! Interfaces over netlink: veth pairs between namespaces, and the settings tests need
//! (up, address, MAC, MTU, moving an end to another namespace).

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use netlink_packet_route::link::{
    InfoData, InfoKind, InfoVeth, LinkAttribute, LinkFlags, LinkMessage,
};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec};

use super::names::unique_ifname;
use super::{Error, Netns};

/// An Ethernet address.
pub type Mac = [u8; 6];

/// Packet and byte counters of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
}

/// An interface as the kernel reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkState {
    pub index: u32,
    pub up: bool,
    pub mtu: u32,
    pub mac: Mac,
}

const ENODEV: i32 = 19;

impl Netns {
    /// The index of `ifname` in this namespace.
    pub fn ifindex(&self, ifname: &str) -> Result<u32, Error> {
        let op = format!("find {ifname} in {}", self.name());
        self.netlink(&op, |h| async move { index_of(&h, ifname).await })
    }

    /// The names of every interface in this namespace.
    pub fn links(&self) -> Result<Vec<String>, Error> {
        let op = format!("list links in {}", self.name());
        self.netlink(&op, |h| async move {
            let messages: Vec<LinkMessage> = h.link().get().execute().try_collect().await?;
            Ok(messages.iter().filter_map(link_name).collect())
        })
    }

    /// What the kernel reports about `ifname` now.
    pub fn link_state(&self, ifname: &str) -> Result<LinkState, Error> {
        let op = format!("read {ifname} in {}", self.name());
        let message = self.netlink(&op, |h| async move {
            let mut found = h.link().get().match_name(ifname.to_owned()).execute();
            found
                .try_next()
                .await?
                .ok_or(rtnetlink::Error::RequestFailed)
        })?;
        let mut state = LinkState {
            index: message.header.index,
            up: message.header.flags.contains(LinkFlags::Up),
            mtu: 0,
            mac: [0; 6],
        };
        for attribute in &message.attributes {
            match attribute {
                LinkAttribute::Mtu(mtu) => state.mtu = *mtu,
                LinkAttribute::Address(a) if a.len() == 6 => state.mac.copy_from_slice(a),
                _ => {}
            }
        }
        Ok(state)
    }

    pub fn set_up(&self, ifname: &str) -> Result<(), Error> {
        self.set_link(ifname, "set up", |b| b.up())
    }

    pub fn set_mtu(&self, ifname: &str, mtu: u32) -> Result<(), Error> {
        self.set_link(ifname, "set mtu", |b| b.mtu(mtu))
    }

    pub fn set_mac(&self, ifname: &str, mac: Mac) -> Result<(), Error> {
        self.set_link(ifname, "set mac", |b| b.address(mac.to_vec()))
    }

    /// Moves `ifname` into `to`; it keeps its name, and is down there.
    pub(crate) fn move_link(&self, ifname: &str, to: &Netns) -> Result<(), Error> {
        let fd = to.fd().as_raw_fd();
        self.set_link(ifname, &format!("move to {}", to.name()), |b| {
            b.setns_by_fd(fd)
        })
    }

    /// Adds an address given as CIDR, e.g. `192.0.2.1/30`.
    pub fn add_address(&self, ifname: &str, cidr: &str) -> Result<(), Error> {
        let op = format!("add {cidr} to {ifname} in {}", self.name());
        let (addr, prefix) =
            parse_cidr(cidr).ok_or_else(|| Error::invalid(&op, "not an address/prefix"))?;
        self.netlink(&op, |h| async move {
            let index = index_of(&h, ifname).await?;
            h.address().add(index, addr, prefix).execute().await
        })
    }

    /// Makes a Linux bridge named `name` with `ports` attached, everything up.
    pub fn add_bridge(&self, name: &str, ports: &[&str]) -> Result<(), Error> {
        let op = format!("add bridge {name} in {}", self.name());
        self.netlink(&op, |h| async move {
            h.link()
                .add(rtnetlink::LinkBridge::new(name).up().build())
                .execute()
                .await?;
            let bridge = index_of(&h, name).await?;
            for port in ports {
                let index = index_of(&h, port).await?;
                h.link()
                    .set(
                        LinkUnspec::new_with_index(index)
                            .controller(bridge)
                            .up()
                            .build(),
                    )
                    .execute()
                    .await?;
            }
            Ok(())
        })
    }

    /// Counters of `ifname` as /proc/net/dev shows them in this namespace.
    pub fn link_stats(&self, ifname: &str) -> Result<LinkStats, Error> {
        let op = format!("read counters of {ifname} in {}", self.name());
        let text = self
            .run(|| std::fs::read_to_string("/proc/thread-self/net/dev"))?
            .map_err(|e| Error::io(&op, e))?;
        let line = text
            .lines()
            .find_map(|l| {
                l.trim_start()
                    .strip_prefix(&format!("{ifname}:"))
                    .map(str::to_owned)
            })
            .ok_or_else(|| Error::invalid(&op, "no such interface"))?;
        let n: Vec<u64> = line
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        if n.len() < 16 {
            return Err(Error::invalid(&op, "unexpected /proc/net/dev format"));
        }
        Ok(LinkStats {
            rx_bytes: n[0],
            rx_packets: n[1],
            rx_dropped: n[3],
            tx_bytes: n[8],
            tx_packets: n[9],
            tx_dropped: n[11],
        })
    }

    /// Deletes `ifname` (for a veth, both ends).
    pub fn delete_link(&self, ifname: &str) -> Result<(), Error> {
        let op = format!("delete {ifname} in {}", self.name());
        self.netlink(&op, |h| async move {
            let index = index_of(&h, ifname).await?;
            h.link().del(index).execute().await
        })
    }

    fn set_link(
        &self,
        ifname: &str,
        what: &str,
        change: impl FnOnce(LinkMessageBuilder<LinkUnspec>) -> LinkMessageBuilder<LinkUnspec> + Send,
    ) -> Result<(), Error> {
        let op = format!("{what} {ifname} in {}", self.name());
        self.netlink(&op, |h| async move {
            let index = index_of(&h, ifname).await?;
            let message = change(LinkUnspec::new_with_index(index)).build();
            h.link().set(message).execute().await
        })
    }
}

async fn index_of(handle: &Handle, ifname: &str) -> Result<u32, rtnetlink::Error> {
    let mut found = handle.link().get().match_name(ifname.to_owned()).execute();
    match found.try_next().await? {
        Some(message) => Ok(message.header.index),
        None => Err(rtnetlink::Error::RequestFailed),
    }
}

fn link_name(message: &LinkMessage) -> Option<String> {
    message.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(name) => Some(name.clone()),
        _ => None,
    })
}

fn parse_cidr(cidr: &str) -> Option<(IpAddr, u8)> {
    let net: ipnet::IpNet = cidr.parse().ok()?;
    Some((net.addr(), net.prefix_len()))
}

/// One end of a veth pair: the namespace it is in now, and its name.
#[derive(Debug, Clone, Copy)]
struct End<'a> {
    ns: &'a Netns,
    name: &'a str,
}

/// A veth pair between two namespaces; deleted when dropped (if its namespaces have not
/// taken it with them already).
#[derive(Debug)]
pub struct Veth<'a> {
    a_ns: &'a Netns,
    a_name: String,
    b_ns: &'a Netns,
    b_name: String,
}

impl<'a> Veth<'a> {
    /// A pair with generated unique names on both ends.
    pub fn new(a: &'a Netns, b: &'a Netns) -> Result<Veth<'a>, Error> {
        Veth::named(a, &unique_ifname(), b, &unique_ifname())
    }

    /// A pair with the given names, e.g. `eth1` in both pods. Created in one netlink
    /// request, so there is never a moment with an end in the wrong namespace.
    pub fn named(
        a: &'a Netns,
        a_name: &str,
        b: &'a Netns,
        b_name: &str,
    ) -> Result<Veth<'a>, Error> {
        let op = format!("add veth {}:{a_name} -- {}:{b_name}", a.name(), b.name());
        let peer = LinkUnspec::new_with_name(b_name)
            .setns_by_fd(b.fd().as_raw_fd())
            .build();
        let message = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
            .name(a_name.to_owned())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .build();
        a.netlink(
            &op,
            |h| async move { h.link().add(message).execute().await },
        )?;
        Ok(Veth {
            a_ns: a,
            a_name: a_name.to_owned(),
            b_ns: b,
            b_name: b_name.to_owned(),
        })
    }

    pub fn a_name(&self) -> &str {
        &self.a_name
    }

    pub fn b_name(&self) -> &str {
        &self.b_name
    }

    pub fn a_ns(&self) -> &'a Netns {
        self.a_ns
    }

    pub fn b_ns(&self) -> &'a Netns {
        self.b_ns
    }

    /// Brings both ends up.
    pub fn set_up(&self) -> Result<(), Error> {
        for end in self.ends() {
            end.ns.set_up(end.name)?;
        }
        Ok(())
    }

    /// Sets the MTU of both ends.
    pub fn set_mtu(&self, mtu: u32) -> Result<(), Error> {
        for end in self.ends() {
            end.ns.set_mtu(end.name, mtu)?;
        }
        Ok(())
    }

    /// Moves the B end into `to` (it arrives down).
    pub fn move_b(&mut self, to: &'a Netns) -> Result<(), Error> {
        self.b_ns.move_link(&self.b_name, to)?;
        self.b_ns = to;
        Ok(())
    }

    fn ends(&self) -> [End<'_>; 2] {
        [
            End {
                ns: self.a_ns,
                name: &self.a_name,
            },
            End {
                ns: self.b_ns,
                name: &self.b_name,
            },
        ]
    }
}

impl Drop for Veth<'_> {
    fn drop(&mut self) {
        // Deleting one end deletes the pair. ENODEV or a failed lookup means it is gone.
        if let Err(e) = self.a_ns.delete_link(&self.a_name) {
            if e.errno() != Some(ENODEV)
                && !matches!(
                    e,
                    Error::Netlink {
                        source: rtnetlink::Error::RequestFailed,
                        ..
                    }
                )
            {
                eprintln!("testbed: could not delete veth {}: {e}", self.a_name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_cidr;

    #[test]
    fn cidr_parsing_checks_the_prefix() {
        assert_eq!(parse_cidr("192.0.2.1/30").map(|(_, p)| p), Some(30));
        assert_eq!(parse_cidr("2001:db8::1/64").map(|(_, p)| p), Some(64));
        assert!(parse_cidr("192.0.2.1/33").is_none());
        assert!(parse_cidr("192.0.2.1").is_none());
    }
}
