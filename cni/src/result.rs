//! The ADD result in the version the configuration asks for: prevResult as it came, with
//! xwire's interfaces appended and its addresses pointing at them.

use serde_json::{json, Map, Value};
use xwire_proto::local::AddResult;

/// The configuration versions the plugin accepts (and answers in).
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

pub fn supports(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

fn parts(version: &str) -> Option<(u32, u32, u32)> {
    let mut it = version.split('.').map(|p| p.parse::<u32>().ok());
    Some((it.next()??, it.next()??, it.next()??))
}

pub(crate) fn version_at_least(version: &str, floor: &str) -> bool {
    matches!((parts(version), parts(floor)), (Some(v), Some(f)) if v >= f)
}

/// prevResult with the daemon's interfaces appended, and its addresses when
/// `report_ips`. Addresses are left out by default because the reference plugins' CHECK
/// (bridge, ptp) looks for every address of the result on their own interface, so a
/// chain whose result lists the link addresses fails CHECK.
pub fn merge(version: &str, prev: Option<&Value>, added: &AddResult, report_ips: bool) -> Value {
    let mut result = base(version, prev);
    let interfaces = list(&mut result, "interfaces");
    let offset = interfaces.len() as u64;
    for interface in &added.interfaces {
        let mut entry = json!({"name": interface.name});
        if let Some(mac) = &interface.mac {
            entry["mac"] = json!(mac);
        }
        // `mtu` is a field of 1.1.0 results only.
        if let (Some(mtu), true) = (interface.mtu, version_at_least(version, "1.1.0")) {
            entry["mtu"] = json!(mtu);
        }
        if let Some(sandbox) = &interface.sandbox {
            entry["sandbox"] = json!(sandbox);
        }
        interfaces.push(entry);
    }
    if !report_ips {
        return result;
    }
    let ips = list(&mut result, "ips");
    for ip in &added.ips {
        let mut entry =
            json!({"address": ip.address, "interface": offset + u64::from(ip.interface)});
        if let Some(gateway) = &ip.gateway {
            entry["gateway"] = json!(gateway);
        }
        // Before 1.0.0 every address says its IP version.
        if !version_at_least(version, "1.0.0") {
            let v6 = ip.address.contains(':');
            entry["version"] = json!(if v6 { "6" } else { "4" });
        }
        ips.push(entry);
    }
    result
}

/// Appends veth mode's two ends to `result`'s interfaces.
pub(crate) fn add_veth(
    result: &mut Value,
    pod_interface: &str,
    netns: &str,
    made: &crate::veth_mode::netlink::Made,
) {
    let interfaces = list(result, "interfaces");
    interfaces.push(json!({"name": made.node_interface, "mac": made.node_mac}));
    interfaces.push(json!({"name": pod_interface, "mac": made.pod_mac, "sandbox": netns}));
}

/// prevResult unchanged, for a pod xwire does not manage.
pub(crate) fn pass_through(version: &str, prev: Option<&Value>) -> Value {
    base(version, prev)
}

fn base(version: &str, prev: Option<&Value>) -> Value {
    let mut result = match prev {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        _ => Value::Object(Map::new()),
    };
    result["cniVersion"] = json!(version);
    result
}

fn list<'a>(result: &'a mut Value, key: &str) -> &'a mut Vec<Value> {
    if !result.get(key).is_some_and(Value::is_array) {
        result[key] = json!([]);
    }
    result[key].as_array_mut().expect("just made an array")
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::local::{CniInterface, CniIp};

    fn added() -> AddResult {
        AddResult {
            interfaces: vec![CniInterface {
                name: "eth1".into(),
                mac: Some("02:00:00:00:00:01".into()),
                mtu: Some(9000),
                sandbox: Some("/run/netns/x".into()),
            }],
            ips: vec![CniIp {
                address: "10.0.0.1/30".into(),
                gateway: None,
                interface: 0,
            }],
        }
    }

    fn prev() -> Value {
        json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "labbr0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/run/netns/x"}],
            "ips": [{"address": "10.199.77.5/24", "gateway": "10.199.77.1", "interface": 2}],
            "dns": {},
            "extra": "kept"
        })
    }

    #[test]
    fn appends_after_the_previous_interfaces() {
        let r = merge("1.0.0", Some(&prev()), &added(), true);
        assert_eq!(r["interfaces"].as_array().unwrap().len(), 4);
        assert_eq!(r["interfaces"][3]["name"], "eth1");
        assert!(r["interfaces"][3].get("mtu").is_none());
        assert_eq!(
            r["ips"][1],
            json!({"address": "10.0.0.1/30", "interface": 3})
        );
        assert_eq!(r["ips"][0], prev()["ips"][0]);
        assert_eq!(r["extra"], "kept");
    }

    #[test]
    fn answers_in_the_asked_version() {
        let r = merge("1.1.0", Some(&prev()), &added(), true);
        assert_eq!(
            merge("1.1.0", Some(&prev()), &added(), false)["ips"],
            prev()["ips"]
        );
        assert_eq!(r["cniVersion"], "1.1.0");
        assert_eq!(r["interfaces"][3]["mtu"], 9000);
        let r = merge("0.3.1", None, &added(), true);
        assert_eq!(r["ips"][0]["version"], "4");
        assert_eq!(r["ips"][0]["interface"], 0);
        assert_eq!(
            pass_through("0.4.0", Some(&prev()))["interfaces"],
            prev()["interfaces"]
        );
    }

    #[test]
    fn versions_compare_numerically() {
        assert!(version_at_least("1.1.0", "0.4.0"));
        assert!(!version_at_least("0.3.1", "0.4.0"));
        assert!(!version_at_least("bogus", "0.4.0"));
    }
}
