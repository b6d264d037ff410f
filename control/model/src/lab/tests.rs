use super::*;

/// A small lab: two nodes, three pods, a same-node and two cross-node links. The lab's
/// own tests read it too.
const DEMO: &str = include_str!("../../tests/fixtures/demo-lab.yaml");

/// Parses `DEMO` with `from` replaced by `to` and returns the refusal.
fn refused(from: &str, to: &str) -> LabFileError {
    assert!(DEMO.contains(from), "{from:?} is not in the demo");
    parse(&DEMO.replacen(from, to, 1), None).expect_err("the file is refused")
}

#[test]
fn the_demo_lab_parses_and_links_without_uid_get_the_smallest_free_ones() {
    let lab = parse(DEMO, None).unwrap();
    assert_eq!(lab.name, "demo");
    assert_eq!(lab.nodes, ["node-a", "node-b"]);
    assert_eq!(lab.pods["r3"], "node-b");
    let uids: Vec<u64> = lab.links.iter().map(|l| l.uid).collect();
    assert_eq!(uids, [0, 7, 1]);
    assert_eq!(lab.links[1].mtu, Some(9000));
    assert_eq!(lab.links[1].endpoints[1].to_string(), "r3:eth1");
    assert_eq!(
        lab.links[1].ips.as_ref().unwrap()[0],
        "192.0.2.1/30".to_string()
    );
}

#[test]
fn an_unknown_pod_in_a_link_is_refused_at_its_endpoint() {
    let e = refused("[r1:eth2, r3:eth1]", "[r1:eth2, r9:eth1]");
    assert_eq!((e.line, e.column), (9, 26), "{e}");
    assert!(e.message.contains("pod r9 is not in `pods`"), "{e}");
}

#[test]
fn an_interface_used_twice_is_refused_at_its_second_use() {
    let e = refused("[r2:eth2, r3:eth2]", "[r2:eth1, r3:eth2]");
    assert_eq!((e.line, e.column), (14, 17), "{e}");
    assert!(e.message.contains("r2:eth1 is used by another link"), "{e}");
}

#[test]
fn a_reused_uid_is_refused_at_its_second_use() {
    let e = refused(
        "  - endpoints: [r2:eth2, r3:eth2]\n",
        "  - endpoints: [r2:eth2, r3:eth2]\n    uid: 7\n",
    );
    assert_eq!((e.line, e.column), (15, 10), "{e}");
    assert!(e.message.contains("uid 7 is used by another link"), "{e}");
}

#[test]
fn unknown_fields_are_refused_where_they_are() {
    let e = refused("    mtu: 9000\n", "    mtu: 9000\n    speed: 10G\n");
    assert_eq!((e.line, e.column), (13, 5), "{e}");
    assert!(e.message.contains("speed"), "{e}");
    let e = refused("name: demo\n", "name: demo\ncolour: blue\n");
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("colour"), "{e}");
    let e = refused("r3: {node: node-b}", "r3: {node: node-b, imag: frr}");
    assert_eq!(e.line, 6, "{e}");
    assert!(e.message.contains("imag"), "{e}");
}

#[test]
fn other_mistakes_are_refused_with_their_place() {
    let cases = [
        (
            "r3: {node: node-b}",
            "r3: {node: node-c}",
            6,
            "not in `nodes`",
        ),
        (
            "r2: {node: node-a}",
            "r1: {node: node-b}",
            5,
            "Duplicate key",
        ),
        (
            "[r1:eth1, r2:eth1]",
            "[r1:eth1, r2-eth1]",
            8,
            "not pod:interface",
        ),
        (
            "[r1:eth1, r2:eth1]",
            "[r1:eth1, r1:eth9]",
            8,
            "two different pods",
        ),
        (
            "[r1:eth1, r2:eth1]",
            "[r1:eth1]",
            8,
            "exactly two endpoints",
        ),
        (
            "[r1:eth1, r2:eth1]",
            "[r1:eth1, r2:averyveryverylongname]",
            8,
            "not a valid interface name",
        ),
        ("192.0.2.2/30]", "192.0.2.2]", 11, "prefix length"),
        ("mtu: 9000", "mtu: 20", 12, "outside 68..=65517"),
        ("mtu: 9000", "mtu: lots", 12, "invalid digit"),
        ("carrier: datagram", "carrier: pigeon", 13, "pigeon"),
        ("name: demo", "name: Demo_1", 1, "lab name"),
        (
            "nodes: [node-a, node-b]",
            "nodes: [node-a, node-a]",
            2,
            "listed twice",
        ),
        ("  r3: {node: node-b}", "\tr3: {node: node-b}", 6, ""),
    ];
    for (from, to, line, says) in cases {
        let e = refused(from, to);
        assert_eq!(e.line, line, "{to:?}: {e}");
        assert!(e.column > 0, "{to:?}: {e}");
        assert!(e.message.contains(says), "{to:?}: {e}");
    }
    let e = parse("name: x\nnodes: []\n", None).unwrap_err();
    assert!(e.message.contains("at least one node"), "{e}");
    let many: Vec<String> = (0..=MAX_NODES).map(|i| format!("n{i}")).collect();
    let e = parse(&format!("name: x\nnodes: [{}]\n", many.join(", ")), None).unwrap_err();
    assert!(e.message.contains("at most 250"), "{e}");
    let e = parse("nodes: [a]\n", None).unwrap_err();
    assert!(e.message.contains("name"), "{e}");
    let pods: String = (0..=MAX_PODS)
        .map(|i| format!("  p{i}: {{node: a}}\n"))
        .collect();
    let e = parse(&format!("name: x\nnodes: [a]\npods:\n{pods}"), None).unwrap_err();
    assert!(e.message.contains("at most 20000"), "{e}");
}

#[test]
fn a_changed_file_keeps_the_uids_its_unchanged_links_were_given() {
    let before = parse(DEMO, None).unwrap();
    // The first link goes; the last keeps uid 1 rather than taking the freed 0, and a
    // new link takes 0.
    let changed = DEMO
        .replace("  - endpoints: [r1:eth1, r2:eth1]\n", "")
        .replace("pods:\n", "pods:\n  r4: {node: node-b}\n")
        + "  - endpoints: [r4:eth1, r1:eth1]\n";
    let after = parse(&changed, Some(&before)).unwrap();
    let uids: Vec<u64> = after.links.iter().map(|l| l.uid).collect();
    assert_eq!(uids, [7, 1, 0]);
    // Endpoints given the other way round are the same link.
    let swapped = DEMO.replace("[r2:eth2, r3:eth2]", "[r3:eth2, r2:eth2]");
    let again = parse(&swapped, Some(&before)).unwrap();
    assert_eq!(again.links[2].uid, 1);
}

#[test]
fn a_pod_with_an_image_is_a_container_and_its_fields_need_the_image() {
    let lab = parse(
        &DEMO.replacen(
            "r1: {node: node-a}",
            "r1: {node: node-a, image: localhost/box:1, cmd: \"sh -c 'sleep 60'\", env: {A: b}, \
             binds: [\"data:/data:ro\"], exec: [\"ip link set lo up\"]}",
            1,
        ),
        None,
    )
    .unwrap();
    let r1 = &lab.containers["r1"];
    assert_eq!(r1.image, "localhost/box:1");
    assert_eq!(r1.cmd.as_deref().unwrap(), ["sh", "-c", "sleep 60"]);
    assert_eq!(r1.env["A"], "b");
    assert_eq!(r1.binds, ["data:/data:ro"]);
    assert_eq!(r1.exec, ["ip link set lo up"]);
    assert!(!lab.containers.contains_key("r2"));

    let e = refused("r2: {node: node-a}", "r2: {node: node-a, cmd: [sleep, 1]}");
    assert!(e.message.contains("pod r2 has no `image`"), "{e}");
    assert_eq!(e.line, 5);
    let e = refused(
        "r2: {node: node-a}",
        "r2: {node: node-a, image: x, binds: [\"/data\"]}",
    );
    assert!(e.message.contains("HOST:CONTAINER"), "{e}");
    let e = refused("r2: {node: node-a}", "r2: {node: node-a, image: \"\"}");
    assert!(e.message.contains("must name an image"), "{e}");
}

#[test]
fn frames_per_port_is_the_daemons_default_unless_given_and_within_its_range() {
    assert_eq!(parse(DEMO, None).unwrap().frames_per_port, None);
    let given = DEMO.replacen("nodes:", "frames_per_port: 64\nnodes:", 1);
    assert_eq!(parse(&given, None).unwrap().frames_per_port, Some(64));
    for bad in ["1", "2097152"] {
        let error = refused("nodes:", &format!("frames_per_port: {bad}\nnodes:"));
        assert!(
            error.message.contains("frames_per_port") && error.line == 2,
            "{error:?}"
        );
    }
    let error = refused("nodes:", "frames_per_port: many\nnodes:");
    assert!(error.message.contains("frames_per_port"), "{error:?}");
}

#[test]
fn yaml_null_is_a_value_not_given_and_a_quoted_tilde_is_text() {
    let text = "\
name: nulls
nodes: [a]
pods:
  r1: {node: a, image: alpine, env: {A: ~, B: null, C: \"~\"}, labels: ~, exec: ~, cmd: ~}
  r2: {node: a}
links:
  - endpoints: [r1:eth1, r2:eth1]
    ips: ~
    mtu: null
    impair: ~
";
    let lab = parse(text, None).unwrap();
    let r1 = &lab.containers["r1"];
    assert!(!r1.env.contains_key("A") && !r1.env.contains_key("B"));
    assert_eq!(r1.env["C"], "~");
    assert!(r1.labels.is_empty());
    assert!(r1.exec.is_empty());
    assert_eq!(r1.cmd, None);
    assert_eq!(lab.links[0].ips, None);
    assert_eq!(lab.links[0].mtu, None);
}
