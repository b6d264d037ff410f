//! Small netlink steps the lab takes in its namespaces: bridges, ports on them,
//! addresses and routes.

use std::net::IpAddr;

use anyhow::Result;
use futures::TryStreamExt;
use netlink_packet_route::address::{AddressAttribute, AddressFlags};
use netlink_packet_route::link::{InfoBridge, InfoData, LinkAttribute, LinkMessage};
use xwire_netns::NetnsFd;

/// The link named `name`, if there is one.
pub(crate) async fn link_named(
    h: &rtnetlink::Handle,
    name: &str,
) -> Result<Option<LinkMessage>, rtnetlink::Error> {
    h.link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await
}

/// Whether `ns` has a link named `name`.
pub(crate) fn link_exists(ns: &NetnsFd, name: &str) -> Result<bool> {
    let name = name.to_owned();
    let found = ns.netlink(&format!("look for {name}"), |h| async move {
        // The kernel answers a name it does not know with ENODEV, not an empty dump.
        Ok::<_, rtnetlink::Error>(link_named(&h, &name).await.ok().flatten().is_some())
    })?;
    Ok(found)
}

pub(crate) fn make_bridge(
    ns: &NetnsFd,
    name: &str,
    mtu: Option<u32>,
    alias: Option<&str>,
) -> Result<()> {
    make_bridge_with(ns, name, mtu, alias, Vec::new())
}

/// A bridge with `options` (multicast snooping, for one) set as it is made.
pub(crate) fn make_bridge_with(
    ns: &NetnsFd,
    name: &str,
    mtu: Option<u32>,
    alias: Option<&str>,
    options: Vec<InfoBridge>,
) -> Result<()> {
    let name = name.to_owned();
    let alias = alias.map(str::to_owned);
    ns.netlink(&format!("add bridge {name}"), |h| async move {
        let mut bridge = rtnetlink::LinkBridge::new(&name).up();
        if let Some(mtu) = mtu {
            bridge = bridge.mtu(mtu);
        }
        if !options.is_empty() {
            bridge = bridge.set_info_data(InfoData::Bridge(options));
        }
        h.link().add(bridge.build()).execute().await?;
        // The kernel takes an alias only on a link that exists.
        if let Some(alias) = alias {
            let link = link_named(&h, &name)
                .await?
                .ok_or(rtnetlink::Error::RequestFailed)?;
            let mut message = rtnetlink::LinkUnspec::new_with_index(link.header.index).build();
            message.attributes.push(LinkAttribute::IfAlias(alias));
            h.link().set(message).execute().await?;
        }
        Ok(())
    })?;
    Ok(())
}

pub fn attach(ns: &NetnsFd, port: &str, bridge: &str) -> Result<()> {
    let (port, bridge) = (port.to_owned(), bridge.to_owned());
    ns.netlink(&format!("attach {port} to {bridge}"), |h| async move {
        let bridge = link_named(&h, &bridge).await?.map(|l| l.header.index);
        let port = link_named(&h, &port).await?.map(|l| l.header.index);
        if let (Some(bridge), Some(port)) = (bridge, port) {
            let attach = rtnetlink::LinkUnspec::new_with_index(port)
                .controller(bridge)
                .up()
                .build();
            h.link().set(attach).execute().await?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Adds addresses without duplicate address detection: the addresses are the lab's to
/// give, and a tentative IPv6 address would not answer for a second or two.
pub(crate) fn add_addresses(ns: &NetnsFd, ifname: &str, addresses: &[(IpAddr, u8)]) -> Result<()> {
    let ifname = ifname.to_owned();
    let addresses = addresses.to_vec();
    ns.netlink(&format!("address {ifname}"), |h| async move {
        let link = link_named(&h, &ifname)
            .await?
            .ok_or(rtnetlink::Error::RequestFailed)?;
        for (address, prefix) in addresses {
            let mut request = h.address().add(link.header.index, address, prefix);
            request
                .message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
            request.execute().await?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Adds the route `dst/prefix via gateway`.
pub fn add_route(ns: &NetnsFd, dst: (IpAddr, u8), gateway: IpAddr) -> Result<()> {
    ns.netlink(
        &format!("route {}/{} via {gateway}", dst.0, dst.1),
        |h| async move {
            let message = rtnetlink::RouteMessageBuilder::<IpAddr>::new()
                .destination_prefix(dst.0, dst.1)
                .and_then(|b| b.gateway(gateway))
                .map_err(|_| rtnetlink::Error::RequestFailed)?
                .build();
            h.route().add(message).execute().await
        },
    )?;
    Ok(())
}
