//! Interface names as a kind's users write them (`ethernet-1/1`, `1/1/c1/1`,
//! `Ethernet0/1`), and the Linux names containerlab gives them, by each kind's documented
//! scheme (containerlab's manual, "kinds"): a `/` cannot be in a Linux interface name.
//!
//! - `nokia_srlinux` (`srl`): `ethernet-L/P` is `eL-P`, `ethernet-L/P/C` is `eL-P-C`;
//! - `nokia_srsim`: `C/M/P` is `eC-M-P`, with `xX/` and `/cN` kept as `xX-` and `-cN`
//!   (`1/1/c1/1` is `e1-1-c1-1`, `1/x2/1/3` is `e1-x2-1-3`);
//! - `cisco_iol`: `EthernetS/P` (or `eS/P`) is `eth(4×S+P)`, four ports to a slot;
//! - `arista_ceos` (`ceos`): `EthernetN` is `ethN`;
//! - `juniper_vmx`: `ge-0/0/X`, `xe-0/0/X` or `et-0/0/X` is `eth(X+1)`, ports counted
//!   from 0; `juniper_vjunosswitch`: `ge-0/0/X` the same way;
//! - `cisco_csr1000v`: `GigabitEthernetN` (or `GiN`) is `eth(N-1)`: `Gi1` is the
//!   management port, so data ports start at `Gi2`;
//! - `aruba_aoscx`: `1/1/N` is `ethN`.
//!
//! Names that are already Linux names pass through unchanged, as containerlab takes them.

/// The Linux name of interface `name` of a node of kind `kind`, if the kind maps it; an
/// error for a name the kind reserves.
pub(super) fn linux_name(kind: &str, name: &str) -> Result<Option<String>, String> {
    Ok(match kind {
        "nokia_srlinux" | "srl" => srlinux(name),
        "nokia_srsim" => srsim(name),
        "cisco_iol" => iol(name),
        "arista_ceos" | "ceos" => eth_after(name, "Ethernet"),
        "juniper_vmx" => junos(name, &["ge", "xe", "et"]),
        "juniper_vjunosswitch" => junos(name, &["ge"]),
        "cisco_csr1000v" => return csr(name),
        "aruba_aoscx" => eth_after(name, "1/1/"),
        _ => None,
    })
}

/// `TYPE-0/0/X` for one of `types`: `eth(X+1)`.
fn junos(name: &str, types: &[&str]) -> Option<String> {
    let (kind, rest) = name.split_once('-')?;
    if !types.contains(&kind) {
        return None;
    }
    let port = decimal(rest.strip_prefix("0/0/")?)?;
    Some(format!("eth{}", port + 1))
}

/// `PREFIX` and an index N: `ethN`.
fn eth_after(name: &str, prefix: &str) -> Option<String> {
    let n = index(name.strip_prefix(prefix)?)?;
    Some(format!("eth{n}"))
}

fn csr(name: &str) -> Result<Option<String>, String> {
    let Some(n) = name
        .strip_prefix("GigabitEthernet")
        .or_else(|| name.strip_prefix("Gi"))
        .and_then(index)
    else {
        return Ok(None);
    };
    if n == 1 {
        return Err(format!(
            "{name} is the management port of kind cisco_csr1000v; its data ports start at Gi2"
        ));
    }
    Ok(Some(format!("eth{}", n - 1)))
}

/// Digits only (no sign, no blanks), as a number.
fn decimal(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Positive decimal numbers only (containerlab's indices start at 1).
fn index(text: &str) -> Option<u32> {
    decimal(text).filter(|&n| n >= 1)
}

fn srlinux(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.strip_prefix("ethernet-")?.split('/').collect();
    let numbers: Option<Vec<u32>> = parts.iter().map(|p| index(p)).collect();
    match numbers?.as_slice() {
        [l, p] => Some(format!("e{l}-{p}")),
        [l, p, c] => Some(format!("e{l}-{p}-{c}")),
        _ => None,
    }
}

fn srsim(name: &str) -> Option<String> {
    let parts: Vec<&str> = name.split('/').collect();
    let (card, rest) = parts.split_first()?;
    let card = index(card)?;
    let (xiom, rest) = match rest.split_first() {
        Some((x, rest)) if x.starts_with('x') => (Some(index(&x[1..])?), rest),
        _ => (None, rest),
    };
    let (mda, rest) = rest.split_first()?;
    let mda = index(mda)?;
    let (connector, port) = match rest {
        [port] => (None, index(port)?),
        [c, port] if c.starts_with('c') => (Some(index(&c[1..])?), index(port)?),
        _ => return None,
    };
    let xiom = xiom.map(|x| format!("x{x}-")).unwrap_or_default();
    let connector = connector.map(|c| format!("c{c}-")).unwrap_or_default();
    Some(format!("e{card}-{xiom}{mda}-{connector}{port}"))
}

fn iol(name: &str) -> Option<String> {
    let rest = name
        .strip_prefix("Ethernet")
        .or_else(|| name.strip_prefix('e'))?
        .trim_start();
    let (slot, port) = rest.split_once('/')?;
    let (slot, port) = (decimal(slot)?, decimal(port)?);
    Some(format!("eth{}", slot * 4 + port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kinds_names_map_by_its_scheme() {
        let cases = [
            ("nokia_srlinux", "ethernet-1/1", Some("e1-1")),
            ("srl", "ethernet-2/10/3", Some("e2-10-3")),
            ("nokia_srlinux", "ethernet-0/1", None),
            ("nokia_srlinux", "e1-1", None),
            ("nokia_srsim", "1/1/c1/1", Some("e1-1-c1-1")),
            ("nokia_srsim", "1/1/1", Some("e1-1-1")),
            ("nokia_srsim", "1/x2/1/c3/4", Some("e1-x2-1-c3-4")),
            ("nokia_srsim", "1/x2/1/4", Some("e1-x2-1-4")),
            ("nokia_srsim", "1/1", None),
            ("cisco_iol", "Ethernet0/1", Some("eth1")),
            ("cisco_iol", "e1/2", Some("eth6")),
            ("cisco_iol", "Ethernet 0/3", Some("eth3")),
            ("cisco_iol", "eth1", None),
            ("linux", "ethernet-1/1", None),
            ("arista_ceos", "Ethernet1", Some("eth1")),
            ("ceos", "Ethernet12", Some("eth12")),
            ("ceos", "eth3", None),
            ("juniper_vmx", "ge-0/0/0", Some("eth1")),
            ("juniper_vmx", "et-0/0/4", Some("eth5")),
            ("juniper_vmx", "ge-0/1/0", None),
            ("juniper_vjunosswitch", "ge-0/0/2", Some("eth3")),
            ("juniper_vjunosswitch", "xe-0/0/2", None),
            ("cisco_csr1000v", "GigabitEthernet2", Some("eth1")),
            ("cisco_csr1000v", "Gi4", Some("eth3")),
            ("aruba_aoscx", "1/1/1", Some("eth1")),
            ("aruba_aoscx", "1/2/1", None),
        ];
        for (kind, name, linux) in cases {
            assert_eq!(
                linux_name(kind, name).unwrap().as_deref(),
                linux,
                "{kind} {name}"
            );
        }
        let reserved = linux_name("cisco_csr1000v", "Gi1").unwrap_err();
        assert!(reserved.contains("management"), "{reserved}");
    }
}
