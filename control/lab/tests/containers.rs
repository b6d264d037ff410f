//! Pods that run container images with podman (examples/containers.yaml, its image built
//! by the example's own script): wired, reachable from inside their containers, and gone
//! with the lab, also after a `kill -9`.

mod support;

use std::path::Path;
use std::process::Command;
use std::sync::Once;
use std::time::Duration;

use support::eventually;
use support::lab::{namespaces_of, run, text, unique, Lab};

const IMAGE: &str = "localhost/xwire-busybox:latest";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// Builds the example's image, as its instructions say, once per test process. The build
/// must leave the host's network as it was (podman's default network would add a bridge).
fn example_image() {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        let bridge = Path::new("/sys/class/net/cni-podman0");
        let bridge_before = bridge.exists();
        let script = repo().join("examples/containers/build-image.sh");
        let out = Command::new(&script).output().expect("run build-image.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            bridge_before || !bridge.exists(),
            "building the image made the host bridge cni-podman0"
        );
    });
}

/// What `podman ARGS` prints; it must succeed.
fn podman(args: &[&str]) -> String {
    let out = Command::new("podman").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The id of pod `pod`'s container in lab `lab`.
fn container_id(lab: &str, pod: &str) -> String {
    let name = format!("xwire-lab-{lab}-{pod}");
    podman(&["container", "inspect", "--format", "{{.Id}}", &name])
        .trim()
        .to_owned()
}

fn lab_containers(name: &str) -> Vec<String> {
    let label = format!("label=dev.xwire.lab={name}");
    podman(&["ps", "--all", "--format", "{{.Names}}", "--filter", &label])
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The example lab, named `name`, its bind taken from the example's directory.
fn example(name: &str) -> String {
    let yaml = std::fs::read_to_string(repo().join("examples/containers.yaml")).unwrap();
    let motd = repo().join("examples/containers/motd");
    yaml.replace("name: boxes", &format!("name: {name}"))
        .replace("containers/motd:", &format!("{}:", motd.display()))
}

fn in_pod(lab: &Lab, pod: &str, command: &[&str]) -> (bool, String) {
    let out = lab.exec(pod, command);
    (out.status.success(), text(&out))
}

/// Each pod answers a ping to its address from inside its container (busybox's ping).
fn assert_pings(lab: &Lab, pings: &[(&str, &str)]) {
    for (pod, address) in pings {
        assert!(
            eventually(Duration::from_secs(15), || {
                in_pod(lab, pod, &["ping", "-c", "1", "-W", "1", address]).0
            }),
            "{pod} -> {address}"
        );
    }
}

#[test]
fn pods_run_their_images_in_their_wired_namespaces_and_leave_nothing_behind() {
    example_image();
    let name = unique("ctr");
    let lab = Lab::up(&name, &example(&name));
    let status = lab.status();
    for pod in status["pods"].as_array().unwrap() {
        assert_eq!(pod["image"], IMAGE, "{pod}");
        assert_eq!(pod["container"], "running", "{pod}");
    }
    assert_eq!(lab_containers(&name).len(), 3);

    // From inside the containers, across the local wire and both remote ones.
    assert_pings(
        &lab,
        &[
            ("r1", "10.0.12.2"),
            ("r1", "10.0.13.2"),
            ("r3", "10.0.23.1"),
        ],
    );
    // It is the container that runs the command: its process 1 is the image's command,
    // its host name the pod's, and the lab file's env, bind and exec took effect.
    let (_, init) = in_pod(&lab, "r1", &["cat", "/proc/1/cmdline"]);
    assert!(init.starts_with("/bin/sh"), "{init}");
    assert_eq!(in_pod(&lab, "r2", &["hostname"]).1.trim(), "r2");
    assert_eq!(
        in_pod(&lab, "r1", &["cat", "/tmp/ready"]).1.trim(),
        "edge 1"
    );
    assert_eq!(
        in_pod(&lab, "r1", &["cat", "/etc/motd"]).1.trim(),
        "Welcome to an xwire lab box."
    );
    let code = lab.exec("r2", &["sh", "-c", "exit 4"]).status.code();
    assert_eq!(code, Some(4));

    // Everything of the lab but its containers killed hard; down still removes them.
    for pid in lab.pids() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = run(&["lab", "down", "--lab", &name]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("3 containers"), "{}", text(&out));
    assert_eq!(lab_containers(&name), Vec::<String>::new());
    assert_eq!(namespaces_of(&name), Vec::<String>::new());
    assert!(!Path::new("/run/xwire/labs").join(&name).exists());
}

#[test]
fn a_missing_image_is_named_with_how_to_build_it_before_anything_is_made() {
    let name = unique("noimg");
    let yaml = format!(
        "name: {name}\nnodes: [n1]\npods:\n  r1: {{node: n1, image: localhost/xwire-no-such-image:1, image_pull_policy: Never}}\n  r2: {{node: n1}}\nlinks:\n  - endpoints: [r1:eth1, r2:eth1]\n"
    );
    let lab = Lab::write(&name, &yaml);
    let out = run(&["lab", "up", lab.file.to_str().unwrap()]);
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("image localhost/xwire-no-such-image:1 (pods r1) is not in the local image store, and its image_pull_policy is Never"),
        "{said}"
    );
    assert!(
        said.contains("podman build") && said.contains("podman load"),
        "{said}"
    );
    assert!(!said.contains("backtrace"), "{said}");
    assert_eq!(namespaces_of(&name), Vec::<String>::new());
    assert!(!Path::new("/run/xwire/labs").join(&name).exists());
}

/// A registry on loopback (Debian's docker-registry, as a user would run one), its
/// storage in a directory of its own; stopped on drop.
struct Registry {
    child: std::process::Child,
    port: u16,
    /// A registries.conf that lets podman speak plain HTTP to it.
    conf: std::path::PathBuf,
    _dir: support::TempDir,
}

impl Registry {
    fn start(label: &str) -> Registry {
        let dir = support::TempDir::new(label);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.0.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.0.join("storage").display()
            ),
        )
        .unwrap();
        let conf = dir.0.join("registries.conf");
        std::fs::write(
            &conf,
            format!("[[registry]]\nlocation = \"127.0.0.1:{port}\"\ninsecure = true\n"),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run docker-registry (apt-get install docker-registry; cargo xtask test installs it)");
        let registry = Registry {
            child,
            port,
            conf,
            _dir: dir,
        };
        assert!(
            eventually(Duration::from_secs(20), || {
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            }),
            "the registry does not listen on 127.0.0.1:{port}"
        );
        registry
    }

    /// `image` pushed to the registry as `repository:tag`; its name there, which the
    /// local store does not hold.
    fn holding(&self, image: &str, repository: &str, tag: &str) -> String {
        let remote = format!("127.0.0.1:{}/{repository}:{tag}", self.port);
        podman(&["tag", image, &remote]);
        podman(&["push", "--tls-verify=false", "--quiet", &remote]);
        podman(&["rmi", &remote]);
        remote
    }

    /// `xwirectl lab up FILE` with podman told of this registry.
    fn lab_up(&self, lab: &Lab) -> std::process::Output {
        support::lab::xwirectl()
            .args(["lab", "up", lab.file.to_str().unwrap()])
            .env("CONTAINERS_REGISTRIES_CONF", &self.conf)
            .output()
            .unwrap()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_image_the_store_lacks_is_pulled_from_a_registry_and_one_nobody_has_stops_the_lab_first() {
    example_image();
    let registry = Registry::start(&unique("registry"));
    let tag = format!("t{}", std::process::id());
    let remote = registry.holding(IMAGE, "xwire/busybox", &tag);
    let exists = |image: &str| {
        Command::new("podman")
            .args(["image", "exists", image])
            .status()
            .unwrap()
            .success()
    };
    assert!(!exists(&remote));

    // IfNotPresent (the default): pulled, with podman's progress, then run and wired.
    let name = unique("pull");
    let lab = Lab::write(
        &name,
        &format!(
            "name: {name}\nnodes: [n1]\npods:\n  a: {{node: n1, image: \"{remote}\"}}\n  b: {{node: n1, image: \"{remote}\"}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n    ips: [10.9.7.1/30, 10.9.7.2/30]\n"
        ),
    );
    let out = registry.lab_up(&lab);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&format!("pulling {remote}")), "{said}");
    assert!(
        said.contains("Copying") || said.contains("Writing"),
        "{said}"
    );
    assert!(exists(&remote));
    assert_eq!(lab_containers(&name).len(), 2);
    assert_pings(&lab, &[("a", "10.9.7.2")]);
    drop(lab);
    podman(&["rmi", &remote]);

    // An image no registry has: the lab stops before it makes anything, naming the pod.
    let missing = format!("127.0.0.1:{}/xwire/nobody-has-this:{tag}", registry.port);
    let name = unique("nopull");
    let lab = Lab::write(
        &name,
        &format!(
            "name: {name}\nnodes: [n1]\npods:\n  a: {{node: n1, image: \"{missing}\"}}\n  b: {{node: n1}}\nlinks:\n  - endpoints: [a:eth1, b:eth1]\n"
        ),
    );
    let out = registry.lab_up(&lab);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&format!("pulling image {missing} for pods a")),
        "{said}"
    );
    assert_eq!(namespaces_of(&name), Vec::<String>::new());
    assert!(!Path::new("/run/xwire/labs").join(&name).exists());

    // --no-containers: the same lab comes up for its wiring alone.
    let out = support::lab::xwirectl()
        .args(["lab", "up", "--no-containers", lab.file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("--no-containers: pods a are bare namespaces"));
    assert_eq!(lab_containers(&name), Vec::<String>::new());
    assert_eq!(
        lab.status()["wires"][0]["state"],
        "up",
        "{:#}",
        lab.status()
    );
}

#[test]
fn a_containerlab_topology_imports_and_runs_as_it_is() {
    example_image();
    let name = unique("clab");
    let clab = std::fs::read_to_string(repo().join("examples/containers.clab.yml"))
        .unwrap()
        .replace("name: boxes-clab", &format!("name: {name}"));
    let dir = support::TempDir::new(&name);
    let clab_file = dir.0.join("lab.clab.yml");
    std::fs::write(&clab_file, clab).unwrap();
    let out = run(&["lab", "import", clab_file.to_str().unwrap(), "--nodes", "2"]);
    assert!(out.status.success(), "{}", text(&out));
    let lab = Lab::up(&name, &String::from_utf8(out.stdout).unwrap());
    let status = lab.status();
    let nodes: Vec<&str> = status["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["node-1", "node-2", "node-1"]);
    // r1 (node-1) to r3 (node-1) and r2 (node-2): addressed by the nodes' own exec lines.
    assert_pings(
        &lab,
        &[
            ("r1", "10.0.12.2"),
            ("r1", "10.0.13.2"),
            ("r2", "10.0.23.2"),
        ],
    );
    let out = run(&["lab", "down", "--lab", &name]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(lab_containers(&name), Vec::<String>::new());
}

#[test]
fn an_edit_starts_the_containers_of_added_pods_and_removes_those_of_removed_ones() {
    example_image();
    let name = unique("ctredit");
    let pod = |p: &str| format!("  {p}: {{node: n1, image: \"{IMAGE}\"}}\n");
    let lab_file = |pods: &[&str], link: &str, ips: &str| {
        format!(
            "name: {name}\nnodes: [n1]\npods:\n{}links:\n  - endpoints: [{link}]\n    ips: [{ips}]\n",
            pods.iter().map(|p| pod(p)).collect::<String>()
        )
    };
    let lab = Lab::up(
        &name,
        &lab_file(&["a", "b"], "a:eth1, b:eth1", "10.9.0.1/30, 10.9.0.2/30"),
    );
    assert_pings(&lab, &[("a", "10.9.0.2")]);
    let before = lab_containers(&name);
    assert_eq!(before.len(), 2, "{before:?}");
    let a_before = container_id(&name, "a");

    std::fs::write(
        &lab.file,
        lab_file(&["a", "c"], "a:eth2, c:eth1", "10.9.1.1/30, 10.9.1.2/30"),
    )
    .unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let mut after = lab_containers(&name);
    after.sort();
    assert_eq!(
        after,
        [format!("xwire-lab-{name}-a"), format!("xwire-lab-{name}-c")]
    );
    assert_pings(&lab, &[("a", "10.9.1.2"), ("c", "10.9.1.1")]);
    // The pod that stayed kept its container.
    assert_eq!(container_id(&name, "a"), a_before);

    // A staying pod's container may not change in one edit.
    let changed = lab_file(&["a", "c"], "a:eth2, c:eth1", "10.9.1.1/30, 10.9.1.2/30").replace(
        "  a: {node: n1, image:",
        "  a: {node: n1, env: {X: y}, image:",
    );
    std::fs::write(&lab.file, changed).unwrap();
    let out = run(&["lab", "edit", lab.file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out).contains("pod a's container"), "{}", text(&out));
}
