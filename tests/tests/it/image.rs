//! The node image (`cargo xtask image`; `cargo xtask test` builds it and passes its archive)
//! run as the DaemonSet runs it, with podman: privileged, host PID and network, the host's
//! bpffs, cgroup tree and /run/netns mounted, a daemon directory of the test's own. Pods are
//! enrolled through the image's own `redirect-cni`: by the real CNI chain run as a runtime
//! runs it (Debian's bridge + host-local, then the plugin), with `CNI_NETNS` as each runtime
//! names it (`/var/run/netns/...`, `/run/netns/...`, `/proc/PID/ns/net`), and by a real container runtime,
//! podman with its CNI backend starting a busybox-static container whose outbound TCP lands at
//! the test's proxy listener with its original destination. The apiserver is the local server
//! replaying recorded Pods (no kube-apiserver can be installed here), reached by the
//! containerised daemon over the host's loopback.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use redirect_testkit::{
    cgroup2_root, eventually, privileged_or_skip, probe::Landing, runs_or_skip, unique_name,
    Cgroup, Netns,
};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugin, plugins_installed, CniHost, GATEWAY, VERSION},
    conformance::{listen, listen_at},
    node::Node,
    podman::{busybox_rootfs, image_under_test, missing_tool, Container, Podman, V1Parents},
};
use serde_json::{json, Value};

const NODE: &str = "node-image";

/// The image's tag and archive, or `None` (after saying why) when the test cannot run
/// outside CI; in CI a missing piece is a failure.
fn image_or_skip(test: &str) -> Option<(String, PathBuf)> {
    if !privileged_or_skip(test) {
        return None;
    }
    let why = match (missing_tool(), image_under_test()) {
        (Some(tool), _) => format!("{tool} is not installed (cargo xtask setup installs it)"),
        (None, Err(why)) => why,
        (None, Ok(_)) if !plugins_installed() => {
            "containernetworking-plugins are not installed (cargo xtask setup)".to_owned()
        }
        (None, Ok(image)) => return Some(image),
    };
    runs_or_skip(test, Some(why));
    None
}

/// `path` relative to the cgroup v2 root, as podman's `--cgroup-parent` wants it.
fn cgroup_rel(path: &Path) -> PathBuf {
    let root = cgroup2_root().expect("cgroup v2 root");
    path.strip_prefix(&root)
        .expect("under the cgroup root")
        .to_owned()
}

/// The daemon from the image, as the DaemonSet runs it, on the node's own pins, cgroup and
/// daemon directory (mounted at the same path), reading pods from `api`; waits for `ready`.
fn daemon<'p>(
    podman: &'p Podman,
    image: &str,
    node: &Node,
    api: &PodServer,
    parent: &Path,
) -> Container<'p> {
    std::fs::create_dir_all(&node.dir).expect("daemon dir");
    let dir = node.dir.display().to_string();
    let cgroup = node.cgroup.path().display().to_string();
    let args = [
        "--name",
        &unique_name("rdd"),
        "--privileged",
        "--pid=host",
        "--network=host",
        &format!("--cgroup-parent=/{}", parent.display()),
        "--volume=/sys/fs/bpf:/sys/fs/bpf",
        "--volume=/sys/fs/cgroup:/sys/fs/cgroup",
        "--volume=/run/netns:/run/netns:rslave",
        &format!("--volume={dir}:{dir}"),
        image,
        "daemon",
        "--daemon-dir",
        &dir,
        "--bpffs",
        &node.pins.display().to_string(),
        "--cgroup",
        &cgroup,
        "--proxy-cgroup",
        &cgroup,
        "--kubeconfig",
        &api.kubeconfig().display().to_string(),
        "--node-name",
        NODE,
        "--cluster-dns",
        "10.96.0.10",
        "--pod-get-attempts",
        "3",
        "--pod-get-interval-ms",
        "100",
    ];
    let container = podman.start(None, &[], &args);
    // Creating the datapath runs the verifier over every program: seconds of CPU.
    eventually(
        "the containerised daemon's ready line",
        Duration::from_secs(60),
        || {
            let logs = container.logs();
            if logs.lines().any(|l| l.starts_with("ready ")) {
                return Ok(());
            }
            let state = container.inspect("{{.State.Status}}");
            assert!(
                state == "running",
                "the daemon container is {state}: {logs}"
            );
            Err(logs)
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    container
}

/// `redirect list --json` by the image's own CLI inside the daemon container (what the
/// DaemonSet's readiness probe runs).
fn listed(daemon: &Container<'_>, node: &Node) -> Vec<Value> {
    let dir = node.dir.display().to_string();
    let text = daemon.exec(&["redirect", "list", "--daemon-dir", &dir, "--json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("list --json: {e}: {text}"))
}

/// The image's `redirect-cni`, copied out of it into `dir` (as `redirect install-cni` does on
/// a node).
fn image_plugin(podman: &Podman, image: &str, dir: &Path) -> PathBuf {
    podman.extract(image, "/usr/local/bin/redirect-cni", dir);
    dir.join("redirect-cni")
}

#[test]
fn image_daemon_enrolls_a_pod_through_the_cni_chain() {
    let Some((image, archive)) = image_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let daemon_cg = Cgroup::new("rdd").expect("daemon cgroup");
    let _v1 = V1Parents::new(&[&cgroup_rel(daemon_cg.path())]);
    let podman = Podman::new();
    let loaded = podman.load(&archive, &image);
    let plugin_bin = image_plugin(&podman, &loaded.tag, &podman.plugin_dir());
    let daemon = daemon(
        &podman,
        &loaded.tag,
        &node,
        &api,
        &cgroup_rel(daemon_cg.path()),
    );
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();

    // The bridge (and its gateway address) exists from the first sandbox on.
    let mut world = None;
    // Each path a runtime names a namespace by: containerd's and CRI-O's /var/run/netns/...
    // (the image has no /var), podman's /run/netns/..., a process's /proc/PID/ns/net. The
    // plugin hands the descriptor over; the daemon lists the path it sees the namespace at.
    for (i, how) in ["/var/run/netns", "/run/netns", "/proc"]
        .into_iter()
        .enumerate()
    {
        let uid = unique_name("uid");
        let name = format!("hello-{i}");
        api.put(&recorded_pod("hello.yaml", "shop", &name, &uid, NODE));
        let mut pod = host.sandbox("shop", &name, &uid);
        world.get_or_insert_with(|| host.world_listener());
        let proxy = listen(
            &pod.netns,
            Some(node.cgroup.path()),
            Some((1337, 1337)),
            "proxy",
            &["[::]:15001".into(), "[::]:15006".into()],
            &[],
        );
        let (named, seen) = match how {
            "/var/run/netns" => (PathBuf::from(how).join(pod.netns.name()), pod.netns.path()),
            "/run/netns" => (pod.netns.path(), pod.netns.path()),
            _ => {
                let p = PathBuf::from(format!("/proc/{}/ns/net", proxy.pid()));
                (p.clone(), p)
            }
        };
        pod.call.netns = named.clone();
        let ran = host.redirect_cni_at(&plugin_bin, "ADD", &pod.call, &conf, Some(&pod.prev));
        assert!(ran.ok(), "ADD by {}: {}", named.display(), ran.text());
        assert_eq!(ran.json, pod.prev, "ADD must print prevResult unchanged");
        let list = listed(&daemon, &node);
        assert_eq!(list.len(), 1, "{how}: {list:?}");
        assert_eq!(list[0]["netns"], seen.display().to_string(), "{how}");
        assert_eq!(
            list[0]["pod"],
            json!({"namespace": "shop", "name": name, "uid": uid, "container_id": pod.call.container_id}),
            "{list:?}"
        );
        let outbound = || pod.outbound(node.cgroup.path());
        let captured = format!("at=proxy/[::]:15001 orig={GATEWAY}:80");
        assert_eq!(outbound(), captured, "{how}");

        let del = host.redirect_cni_at(&plugin_bin, "DEL", &pod.call, &conf, None);
        assert!(del.ok(), "DEL by {}: {}", named.display(), del.text());
        assert_eq!(
            listed(&daemon, &node),
            Vec::<Value>::new(),
            "{how}: after DEL"
        );
        let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
        assert_eq!(outbound(), direct, "{how}");
        pod.call.netns = pod.netns.path();
    }
}

/// One connection from inside `container` to GATEWAY:80 by busybox `nc`: where it landed.
fn nc_from(container: &Container<'_>, gateway: &str) -> Landing {
    let line = container.exec(&["sh", "-c", &format!("echo | nc -w 5 {gateway} 80")]);
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("nc's answer {line:?}: {e}"))
}

#[test]
fn podman_container_is_captured_through_its_cni_backend() {
    let Some((image, archive)) = image_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let node = Node::new();
    let pods_cg = node.cgroup.child("pods").expect("pods cgroup");
    let proxy_cg = node.cgroup.child("proxy").expect("proxy cgroup");
    let daemon_cg = Cgroup::new("rdd").expect("daemon cgroup");
    let _v1 = V1Parents::new(&[
        &cgroup_rel(daemon_cg.path()),
        &cgroup_rel(node.cgroup.path()),
        &cgroup_rel(pods_cg.path()),
    ]);
    let api = PodServer::start(&node.dir.join("api"));
    let podman = Podman::new();
    let loaded = podman.load(&archive, &image);
    image_plugin(&podman, &loaded.tag, &podman.plugin_dir());
    for p in ["bridge", "host-local", "loopback"] {
        std::os::unix::fs::symlink(plugin(p), podman.plugin_dir().join(p)).expect("plugin link");
    }
    let daemon = daemon(
        &podman,
        &loaded.tag,
        &node,
        &api,
        &cgroup_rel(daemon_cg.path()),
    );

    // The host side of the pods' network: a namespace of the test's own that podman runs
    // in, where the bridge (unique, a test-only subnet, no masquerade) and its gateway live.
    let host = Netns::new("rph").expect("host netns");
    let gateway = "198.18.210.1";
    let network = unique_name("rpn");
    let conflist = json!({
        "cniVersion": VERSION,
        "name": network,
        "plugins": [
            {"type": "bridge", "bridge": unique_name("rpb"), "isGateway": true, "ipMasq": false,
             "ipam": {"type": "host-local", "subnet": "198.18.210.0/24", "gateway": gateway,
                      "dataDir": podman.dir.join("ipam")}},
            entry(&node.dir.join("daemon.sock")),
        ]
    });
    std::fs::write(
        podman.network_dir().join(format!("{network}.conflist")),
        conflist.to_string(),
    )
    .expect("write the conflist");
    let rootfs = busybox_rootfs(&podman.dir);
    let parent = format!("--cgroup-parent=/{}", cgroup_rel(pods_cg.path()).display());
    // podman passes K8S_POD_NAME (the container's name) and appends its own environment's
    // CNI_ARGS: the pod's namespace and uid, as a kubelet would.
    let run = |namespace: &str, name: &str, uid: &str| {
        let cni_args = format!("K8S_POD_NAMESPACE={namespace};K8S_POD_UID={uid}");
        podman.start(
            Some(&host.path()),
            &[("CNI_ARGS", &cni_args)],
            &[
                "--name",
                name,
                "--network",
                &network,
                &parent,
                "--rootfs",
                &rootfs.display().to_string(),
                "/bin/sleep",
                "600",
            ],
        )
    };

    let name = unique_name("hello");
    let uid = unique_name("uid");
    api.put(&recorded_pod("hello.yaml", "shop", &name, &uid, NODE));
    let mut meshed = run("shop", &name, &uid);
    // podman ran the chain before starting the container: it is enrolled already.
    let netns = meshed.inspect("{{.NetworkSettings.SandboxKey}}");
    let list = listed(&daemon, &node);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["netns"], netns, "{list:?}");
    assert_eq!(
        list[0]["pod"],
        json!({"namespace": "shop", "name": name, "uid": uid, "container_id": meshed.id}),
        "{list:?}"
    );
    let _world = listen(&host, None, None, "world", &[format!("{gateway}:80")], &[]);
    let _proxy = listen_at(
        Path::new(&netns),
        Some(proxy_cg.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    );
    let landing = nc_from(&meshed, gateway);
    assert_eq!(
        landing.to_string(),
        format!("at=proxy/[::]:15001 orig={gateway}:80"),
        "{landing:?}"
    );

    // kube-system is excluded by the plugin: the same connection reaches the gateway.
    let plain = run("kube-system", &unique_name("dns"), "uid-dns");
    assert_eq!(
        nc_from(&plain, gateway).to_string(),
        format!("at=world/{gateway}:80 orig={gateway}:80")
    );
    assert_eq!(listed(&daemon, &node).len(), 1);

    // Removing the container runs the chain's DEL: the enrollment goes.
    meshed.remove();
    assert_eq!(
        listed(&daemon, &node),
        Vec::<Value>::new(),
        "after podman rm"
    );
}

#[test]
fn the_daemonset_names_the_image_of_this_version() {
    let ds = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/daemonset.yaml"),
    )
    .expect("daemonset.yaml");
    let image = format!("image: localhost/redirect:{}", env!("CARGO_PKG_VERSION"));
    // Every container of the DaemonSet (the daemon and install-cni) runs that image.
    let named: Vec<&str> = ds
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("image:"))
        .collect();
    assert!(
        !named.is_empty() && named.iter().all(|l| *l == image),
        "every container of deploy/kubernetes/daemonset.yaml must name `{image}` (what `cargo xtask image` tags): {named:?}"
    );
}
