//! Interfaces made and set up in a namespace through netlink: a veth pair with an end in
//! each of two namespaces, made in one request, and an interface's settings (name, MTU,
//! MAC, address, alias, offloads, IPv6). The daemon's wire ends and the lab's underlay and
//! management network are made with these.

use std::net::IpAddr;
use std::os::fd::AsRawFd;

use futures::TryStreamExt;
use netlink_packet_route::link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkMessage};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec};

use crate::offload::{set_offload, Offload};
use crate::{NetnsError, NetnsFd};

/// How one end of a wire is set up in its namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndSettings {
    pub name: String,
    pub mtu: Option<u32>,
    pub mac: Option<[u8; 6]>,
    pub address: Option<(IpAddr, u8)>,
    pub alias: Option<String>,
    /// Turn TX checksum offload off: the end's frames go through the fast path.
    pub checksum_off: bool,
    pub ipv6: Ipv6,
}

/// What IPv6 an end does of its own accord, set before it comes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ipv6 {
    /// As the namespace's defaults say.
    #[default]
    AsDefault,
    /// Off: a node-side end is a port of the switch (or of a bridge) that carries frames
    /// and has no address. With IPv6 on, each one sent its own router solicitations, MLD
    /// reports and DAD probes into the pod's link, and got a link-local route of the
    /// same prefix as every other end's: adding one to a node with thousands walked them
    /// all, which made a lab's bring-up quadratic.
    Off,
}

impl Ipv6 {
    /// The interface's IPv6 settings (under `/proc/sys/net/ipv6/conf/IF/`) that say so.
    pub fn settings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Ipv6::AsDefault => &[],
            Ipv6::Off => &[("disable_ipv6", "1")],
        }
    }
}

impl EndSettings {
    pub fn named(name: &str) -> EndSettings {
        EndSettings {
            name: name.into(),
            mtu: None,
            mac: None,
            address: None,
            alias: None,
            checksum_off: false,
            ipv6: Ipv6::AsDefault,
        }
    }
}

/// Makes a veth pair with `a.name` in `a_ns` and `b.name` in `b_ns`, in one request (no
/// moment with an end in the wrong namespace, and a name taken in either namespace fails
/// the whole request), then applies both ends' settings and brings them up.
pub fn create_veth(
    a_ns: &NetnsFd,
    a: &EndSettings,
    b_ns: &NetnsFd,
    b: &EndSettings,
) -> Result<(), NetnsError> {
    let op = format!(
        "add veth {}:{} -- {}:{}",
        a_ns.label(),
        a.name,
        b_ns.label(),
        b.name
    );
    let peer = LinkUnspec::new_with_name(&b.name)
        .setns_by_fd(b_ns.file().as_raw_fd())
        .build();
    let message = LinkMessageBuilder::<LinkUnspec>::new_with_info_kind(InfoKind::Veth)
        .name(a.name.clone())
        .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
        .build();
    a_ns.netlink(
        &op,
        |h| async move { h.link().add(message).execute().await },
    )?;
    let configured = configure(a_ns, a).and_then(|()| configure(b_ns, b));
    if configured.is_err() {
        delete_just_made(a_ns, &op, &a.name);
    }
    configured
}

/// Deletes `name`, which the call `op` just made and could not set up; it may not carry
/// its alias yet, so it is found by name alone.
pub fn delete_just_made(ns: &NetnsFd, op: &str, name: &str) {
    let _ = ns.netlink(op, |h| async move {
        let index = index_of(&h, name).await?;
        h.link().del(index).execute().await
    });
}

/// The longest interface alias the kernel keeps (IFALIASZ less its terminating NUL).
pub const MAX_ALIAS: usize = 255;

/// Applies `end`'s settings to the existing interface `end.name` and brings it up.
pub fn configure(ns: &NetnsFd, end: &EndSettings) -> Result<(), NetnsError> {
    let op = format!("configure {}", end.name);
    // Kubernetes allows names that together make a longer label than the kernel
    // keeps; it would answer only "Numerical result out of range".
    if let Some(alias) = end.alias.as_ref().filter(|a| a.len() > MAX_ALIAS) {
        return Err(NetnsError::Io {
            op,
            ns: ns.label().into(),
            cause: std::io::Error::other(format!(
                "xwire's label for it, {alias:?}, is {} bytes and the kernel keeps at most \
                 {MAX_ALIAS}: the namespace is too long (Kubernetes allows 63 bytes)",
                alias.len()
            )),
        });
    }
    if end.checksum_off {
        let name = end.name.clone();
        ns.run(&op, || set_offload(&name, Offload::TxChecksum, false))?
            .map_err(|source| NetnsError::Io {
                op: format!("turn tx checksum off on {}", end.name),
                ns: ns.label().into(),
                cause: source,
            })?;
    }
    let ipv6 = end.ipv6.settings();
    if !ipv6.is_empty() {
        ns.write_ipv6_settings(
            &format!("set IPv6 {:?} on {}", end.ipv6, end.name),
            &end.name,
            ipv6,
        )?;
    }
    let end = end.clone();
    ns.netlink(&op, |h| async move {
        let index = index_of(&h, &end.name).await?;
        let mut builder = LinkUnspec::new_with_index(index);
        if let Some(mtu) = end.mtu {
            builder = builder.mtu(mtu);
        }
        if let Some(mac) = end.mac {
            builder = builder.address(mac.to_vec());
        }
        let mut message = builder.build();
        if let Some(alias) = &end.alias {
            message
                .attributes
                .push(LinkAttribute::IfAlias(alias.clone()));
        }
        h.link().set(message).execute().await?;
        if let Some((addr, prefix)) = end.address {
            h.address().add(index, addr, prefix).execute().await?;
        }
        let up = LinkUnspec::new_with_index(index).up().build();
        h.link().set(up).execute().await
    })
}

pub async fn find(handle: &Handle, name: &str) -> Result<LinkMessage, rtnetlink::Error> {
    let mut found = handle.link().get().match_name(name.to_owned()).execute();
    found
        .try_next()
        .await?
        .ok_or(rtnetlink::Error::RequestFailed)
}

async fn index_of(handle: &Handle, name: &str) -> Result<u32, rtnetlink::Error> {
    Ok(find(handle, name).await?.header.index)
}
