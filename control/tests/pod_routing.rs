//! Routing in pods, read back with iproute2 (`ip -j`, netlink): router mode gives each
//! addressed interface its own table and rule, so a reply leaves by the interface its
//! request came in on; static routes from the Topology are set once their wire is up;
//! a Topology change and a DEL take away exactly what xwire added, and an ADD after a
//! pod restart sets it all again.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{call, eventually, failed_check, start_node, Pod};
use xwire_proto::local::{Request, Response};
use xwire_testbed::checks::ping;
use xwire_testbed::Netns;

/// r1 and r2 on one node, two wires between them; `r1_extra` and `r2_extra` are added
/// to each pod's spec (routes, policy_routing).
fn topology(r1_extra: &str, r2_extra: &str) -> String {
    let side = |me: &str, peer: &str, mine: u8, theirs: u8, extra: &str| {
        format!(
            "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {me}, namespace: lab}}\nspec:\n  links:\n  - {{uid: 1, peer_pod: {peer}, local_intf: eth1, peer_intf: eth1, local_ip: 10.0.1.{mine}/30, peer_ip: 10.0.1.{theirs}/30}}\n  - {{uid: 2, peer_pod: {peer}, local_intf: eth2, peer_intf: eth2, local_ip: 10.0.2.{mine}/30, peer_ip: 10.0.2.{theirs}/30}}\n{extra}"
        )
    };
    format!(
        "{}---\n{}",
        side("r1", "r2", 1, 2, r1_extra),
        side("r2", "r1", 2, 1, r2_extra)
    )
}

const R1_ROUTED: &str =
    "  policy_routing: true\n  routes:\n  - {dst: 192.0.2.0/24, via: 10.0.1.2}\n";
const R2_ROUTED: &str = "  routes:\n  - {dst: 198.51.100.0/24, via: 10.0.2.1}\n";

fn ip_json(ns: &Netns, args: &[&str]) -> Vec<Value> {
    let out = ns.exec(Command::new("ip").arg("-j").args(args)).unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn run(ns: &Netns, args: &[&str]) {
    let out = ns.exec(Command::new("ip").args(args)).unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

/// `(from, table, priority, protocol)` of every rule with a source.
fn rules(ns: &Netns) -> Vec<(String, String, u64, String)> {
    ["-4", "-6"]
        .iter()
        .flat_map(|family| ip_json(ns, &["-d", family, "rule", "show"]))
        .filter(|r| r["src"].is_string() && r["src"] != "all")
        .map(|r| {
            (
                r["src"].as_str().unwrap().to_owned(),
                r["table"].as_str().unwrap_or_default().to_owned(),
                r["priority"].as_u64().unwrap(),
                r["protocol"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| r["protocol"].to_string()),
            )
        })
        .collect()
}

/// `dst [via GW] [dev DEV] table T proto P` of every route outside the local table.
fn routes(ns: &Netns) -> Vec<String> {
    ip_json(ns, &["-d", "-4", "route", "show", "table", "all"])
        .iter()
        .filter(|r| r["table"] != "local")
        .map(|r| {
            let mut text = r["dst"].as_str().unwrap().to_owned();
            if let Some(gateway) = r["gateway"].as_str() {
                text += &format!(" via {gateway}");
            }
            text += &format!(
                " dev {} table {} proto {}",
                r["dev"].as_str().unwrap_or("-"),
                r["table"].as_str().unwrap_or("main"),
                r["protocol"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| r["protocol"].to_string())
            );
            text
        })
        .collect()
}

fn has_route(ns: &Netns, route: &str) -> bool {
    routes(ns).iter().any(|r| r == route)
}

fn xwire_rules_and_routes(ns: &Netns) -> (usize, usize) {
    (
        rules(ns).iter().filter(|r| r.3 == "120").count(),
        routes(ns)
            .iter()
            .filter(|r| r.ends_with("proto 120"))
            .count(),
    )
}

#[test]
fn router_mode_and_static_routes_are_set_changed_and_taken_away_exactly() {
    let node = start_node("rt", "");
    node.apply(&topology(R1_ROUTED, R2_ROUTED));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    // r1's wires wait for r2: no interface yet, so no table, rule or route through one.
    assert_eq!(
        xwire_rules_and_routes(&r1.ns),
        (0, 0),
        "{:?}",
        routes(&r1.ns)
    );
    assert_eq!(call(&r2, "ADD", &config).code, 0);

    let wanted_r1 = [
        "10.0.1.0/30 dev eth1 table 1000 proto 120",
        "default via 10.0.1.2 dev eth1 table 1000 proto 120",
        "10.0.2.0/30 dev eth2 table 1001 proto 120",
        "default via 10.0.2.2 dev eth2 table 1001 proto 120",
        "192.0.2.0/24 via 10.0.1.2 dev eth1 table main proto 120",
    ];
    let all_there = eventually(Duration::from_secs(10), || {
        wanted_r1.iter().all(|w| has_route(&r1.ns, w))
            && has_route(
                &r2.ns,
                "198.51.100.0/24 via 10.0.2.1 dev eth2 table main proto 120",
            )
    });
    assert!(
        all_there,
        "r1: {:#?}\nr2: {:#?}\n{}",
        routes(&r1.ns),
        routes(&r2.ns),
        node.log()
    );
    let mut r1_rules = rules(&r1.ns);
    r1_rules.sort();
    assert_eq!(
        r1_rules,
        vec![
            ("10.0.1.1".into(), "1000".into(), 1000, "120".into()),
            ("10.0.2.1".into(), "1001".into(), 1000, "120".into()),
        ]
    );
    // r2 is not in router mode: no rules.
    assert!(rules(&r2.ns).is_empty(), "{:?}", rules(&r2.ns));

    // A reply leaves by the interface its request came in on: r2 pings r1's eth2 from
    // an address r1 has no route to; only r1's eth2 table sends the reply back.
    run(&r2.ns, &["addr", "add", "203.0.113.9/32", "dev", "lo"]);
    run(&r2.ns, &["link", "set", "lo", "up"]);
    let from_elsewhere = |ns: &Netns| {
        ns.exec(Command::new("ping").args([
            "-c",
            "2",
            "-i",
            "0.2",
            "-W",
            "2",
            "-I",
            "203.0.113.9",
            "10.0.2.1",
        ]))
        .unwrap()
        .status
        .success()
    };
    assert!(
        from_elsewhere(&r2.ns),
        "r1 did not answer by eth2: {:#?}",
        routes(&r1.ns)
    );
    // And the static route carries traffic: r1 reaches an address behind r2.
    run(&r2.ns, &["addr", "add", "192.0.2.1/32", "dev", "lo"]);
    assert!(ping(&r1.ns, "192.0.2.1", 2).unwrap());

    // Someone else's rule and route, in one of xwire's tables too: never touched.
    run(
        &r1.ns,
        &[
            "rule", "add", "from", "10.9.9.9", "lookup", "77", "priority", "500",
        ],
    );
    run(
        &r1.ns,
        &[
            "route",
            "add",
            "10.99.0.0/16",
            "dev",
            "eth1",
            "table",
            "1000",
        ],
    );
    let foreign_rule = (
        "10.9.9.9".to_string(),
        "77".to_string(),
        500,
        "unspec".to_string(),
    );

    // The Topology no longer asks for any of it: xwire's go, the foreign ones stay.
    node.apply(&topology("", R2_ROUTED));
    let cleared = eventually(Duration::from_secs(10), || {
        xwire_rules_and_routes(&r1.ns) == (0, 0)
    });
    assert!(
        cleared,
        "r1: {:?} {:#?}\n{}",
        rules(&r1.ns),
        routes(&r1.ns),
        node.log()
    );
    assert!(rules(&r1.ns).contains(&foreign_rule), "{:?}", rules(&r1.ns));
    assert!(has_route(
        &r1.ns,
        "10.99.0.0/16 dev eth1 table 1000 proto boot"
    ));
    assert!(
        !from_elsewhere(&r2.ns),
        "without router mode r1 has no way back"
    );

    // Back on, then DEL in a namespace that stays (as a runtime's other plugins may
    // keep it): exactly xwire's go.
    node.apply(&topology(R1_ROUTED, R2_ROUTED));
    assert!(eventually(
        Duration::from_secs(10),
        || xwire_rules_and_routes(&r1.ns) == (2, 5)
    ));
    assert_eq!(call(&r1, "DEL", &config).code, 0);
    assert_eq!(
        xwire_rules_and_routes(&r1.ns),
        (0, 0),
        "{:?}",
        routes(&r1.ns)
    );
    assert!(rules(&r1.ns).contains(&foreign_rule));

    // The pod starts again (a new ADD): its routes and rules come back with its wires.
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    let back = eventually(Duration::from_secs(10), || {
        xwire_rules_and_routes(&r1.ns) == (2, 5)
    });
    assert!(
        back,
        "r1: {:?} {:#?}\n{}",
        rules(&r1.ns),
        routes(&r1.ns),
        node.log()
    );
    assert!(from_elsewhere(&r2.ns));
}

#[test]
fn a_topology_with_a_route_that_cannot_be_is_refused() {
    let node = start_node("rtbad", "");
    for (extra, expected) in [
        (
            "  routes:\n  - {dst: 192.0.2.1/24, via: 10.0.1.2}\n",
            "host bits",
        ),
        (
            "  routes:\n  - {dst: 192.0.2.0/24, via: 2001:db8::1}\n",
            "address family",
        ),
        (
            "  routes:\n  - {dst: 192.0.2.0, via: 10.0.1.2}\n",
            "prefix length",
        ),
        (
            "  routes:\n  - {dst: 192.0.2.0/24, gw: 10.0.1.2}\n",
            "unknown field",
        ),
    ] {
        let response = node.ask(&xwire_proto::local::Request::TopologyApply(
            xwire_proto::local::TopologyApply {
                objects: topology(extra, "")
                    .split("---\n")
                    .map(|doc| serde_yaml_ng::from_str(doc).unwrap())
                    .collect(),
            },
        ));
        let text = format!("{response:?}");
        assert!(text.contains(expected), "{extra}: {text}");
    }
}

/// CHECK looks at a pod's routes as it looks at its interfaces: one taken away by hand
/// fails it, named, and the next pass puts it back.
#[test]
fn check_names_a_route_taken_away_and_the_next_pass_puts_it_back() {
    let node = start_node("rtchk", "");
    node.apply(&topology(R1_ROUTED, R2_ROUTED));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let config = node.net_config("1.1.0");
    assert_eq!(call(&r1, "ADD", &config).code, 0);
    assert_eq!(call(&r2, "ADD", &config).code, 0);
    let static_route = "192.0.2.0/24 via 10.0.1.2 dev eth1 table main proto 120";
    let routed = eventually(Duration::from_secs(10), || {
        xwire_rules_and_routes(&r1.ns) == (2, 5)
    });
    assert!(routed, "r1: {:#?}\n{}", routes(&r1.ns), node.log());
    let checked = call(&r1, "CHECK", &config);
    assert_eq!(checked.code, 0, "{}", checked.output);

    run(&r1.ns, &["route", "del", "192.0.2.0/24", "via", "10.0.1.2"]);
    let msg = failed_check(&r1, &config);
    assert!(
        msg.contains("192.0.2.0/24") && msg.contains("missing"),
        "{msg}"
    );
    // r2 is as its Topology says: its CHECK passes.
    assert_eq!(call(&r2, "CHECK", &config).code, 0);

    let (changes, failures) = match node.ask(&Request::Reconcile).unwrap() {
        Response::Reconciled { changes, failures } => (changes, failures),
        other => panic!("{other:?}"),
    };
    assert!(failures.is_empty(), "{failures:?}");
    assert!(
        changes.iter().any(|c| c.contains("192.0.2.0/24")),
        "{changes:?}"
    );
    assert!(has_route(&r1.ns, static_route), "{:#?}", routes(&r1.ns));
    assert_eq!(call(&r1, "CHECK", &config).code, 0);

    // A rule of xwire's that its Topology does not ask for (left by hand, or by an older
    // Topology): CHECK names it too.
    run(
        &r1.ns,
        &[
            "rule", "add", "from", "10.7.7.7", "lookup", "1000", "priority", "1000", "proto", "120",
        ],
    );
    let msg = failed_check(&r1, &config);
    assert!(
        msg.contains("10.7.7.7") && msg.contains("not asked for"),
        "{msg}"
    );
}
