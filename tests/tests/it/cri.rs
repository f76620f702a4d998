//! A node as a kubelet runs it: Debian's containerd (its CRI, runc, Debian's bridge +
//! host-local as the primary network) in a node of the test's own (a network namespace for
//! its host network, a mount namespace with a fresh `/run` and bpffs), driven by the
//! kubelet-lite (`redirect-kubelet`) as the kubelet drives it. The DaemonSet's pod runs from
//! the image `cargo xtask image` built, its containers, privileges, mounts, environment and
//! arguments read from `deploy/kubernetes/daemonset.yaml`; its install-cni container puts our
//! entry into the primary conflist. containerd then chooses the namespace paths
//! (`/var/run/netns/cni-...`), the CNI_ARGS and the timing of every ADD and DEL. The apiserver
//! is the recorded-object server (no kube-apiserver can be installed here), in the node's
//! network; what the test adds to the DaemonSet's arguments is only what makes the test's node
//! a node: its cgroup in place of the machine's root (`--cgroup`, `--proxy-cgroup`,
//! `--pod-cgroup-root`), the recorded server's kubeconfig in place of in-cluster credentials,
//! the cluster DNS address and short pod-GET retries.
use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use redirect_kubelet::{images, pod, CriNode, Kubelet, Override, RunningPod};
use redirect_testkit::{
    eventually, netns::in_netns, privileged_or_skip, runs_or_skip, unique_name,
};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    podman::image_under_test,
};
use serde_json::Value;

const NODE: &str = "node-cri";
/// The pods' subnet on the node's bridge; its gateway is the node's address on it.
const SUBNET: &str = "10.244.7.0/24";
const GATEWAY: &str = "10.244.7.1";
const WORLD_PORT: u16 = 8080;

/// The image's tag and archive, or `None` (after saying why) when the test cannot run
/// outside CI; in CI a missing piece is a failure.
fn parts_or_skip(test: &str) -> Option<(String, std::path::PathBuf)> {
    if !privileged_or_skip(test) {
        return None;
    }
    let missing = [
        "/usr/bin/containerd",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/usr/bin/buildah",
        "/bin/busybox",
    ]
    .into_iter()
    .find(|p| !Path::new(p).exists());
    let why = match (missing, image_under_test()) {
        (Some(tool), _) => format!("{tool} is not installed (cargo xtask setup installs it)"),
        (None, Err(why)) => why,
        (None, Ok(image)) => return Some(image),
    };
    runs_or_skip(test, Some(why));
    None
}

/// The DaemonSet's pod template, as the DaemonSet controller makes a pod of it.
fn daemonset_pod() -> k8s_openapi::api::core::v1::Pod {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes/daemonset.yaml");
    let text = std::fs::read_to_string(&path).expect("daemonset.yaml");
    pod::from_yaml(&text, &unique_name("redirect-"), &unique_name("uid-ds"))
        .expect("the DaemonSet's pod")
}

/// A listener in the node's network (where the pods' gateway is): every connection's first
/// line, in order.
fn world(node: &CriNode) -> Arc<Mutex<Vec<String>>> {
    let listener = in_netns(&node.netns.path(), || {
        TcpListener::bind(("0.0.0.0", WORLD_PORT))
    })
    .expect("enter the node's netns")
    .expect("bind the world listener");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            let _ = stream.write_all(b"world\n");
            s.lock().expect("seen").push(line.trim().to_owned());
        }
    });
    seen
}

/// The daemon's `redirect list --json`, run in its container (the DaemonSet's readiness probe).
fn listed(kubelet: &Kubelet<'_>, ds: &RunningPod) -> Vec<Value> {
    let (code, out, err) = kubelet
        .exec(ds, "redirect", &["redirect", "list", "--json"])
        .expect("exec redirect list");
    assert_eq!(code, 0, "redirect list: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("list --json: {e}: {out}"))
}

/// The proxy's JSON access log records of outbound connections, from its container's log.
fn proxied(kubelet: &Kubelet<'_>, meshed: &RunningPod) -> Vec<Value> {
    kubelet
        .logs(meshed, "istio-proxy")
        .lines()
        // CRI log lines: TIME STREAM TAG MESSAGE.
        .filter_map(|l| l.splitn(4, ' ').nth(3))
        .filter_map(|m| serde_json::from_str::<Value>(m).ok())
        .filter(|v| v["kind"] == "access" && v["direction"] == "outbound")
        .collect()
}

#[test]
fn a_pod_containerd_starts_is_captured_by_the_daemonset_run_from_its_image() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let node = CriNode::new(NODE).expect("boot the node");
    for built in images::build(&node.dir).expect("the pause and app images") {
        node.import(&built).expect("import");
    }
    node.import(&archive).expect("import the node image");
    node.write_primary_conflist("1.0.0", SUBNET)
        .expect("the primary conflist");
    let api = PodServer::start_in(&node.dir.join("api"), &node.netns.path());
    let kubelet = Kubelet::new(&node);

    // The DaemonSet's pod, as written; the node's own places added (see the module doc).
    let cgroup = node.cgroup.path().display().to_string();
    let api_dir = node.dir.join("api").display().to_string();
    let mut overrides = HashMap::new();
    overrides.insert(
        "redirect",
        Override {
            append_args: [
                "--cgroup",
                &cgroup,
                "--proxy-cgroup",
                &cgroup,
                "--pod-cgroup-root",
                &cgroup,
                "--kubeconfig",
                &format!("{api_dir}/kubeconfig"),
                "--cluster-dns",
                "10.96.0.10",
                "--pod-get-attempts",
                "3",
                "--pod-get-interval-ms",
                "100",
            ]
            .map(str::to_owned)
            .to_vec(),
            mounts: vec![(api_dir.clone(), api_dir.clone())],
            ..Override::default()
        },
    );
    let ds = kubelet
        .run(&daemonset_pod(), &overrides)
        .unwrap_or_else(|e| panic!("the DaemonSet's pod: {e}"));
    assert_eq!(
        ds.containers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["redirect", "install-cni"]
    );
    eventually(
        "the DaemonSet's pod to be ready",
        Duration::from_secs(90),
        || {
            let ready = ["redirect", "install-cni"]
                .map(|c| kubelet.ready(&ds, c).map_err(|e| e.to_string()));
            match ready {
                [Ok(true), Ok(true)] => Ok(()),
                other => Err(format!(
                    "{other:?}: {}{}",
                    kubelet.logs(&ds, "redirect"),
                    kubelet.logs(&ds, "install-cni")
                )),
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let conflist =
        std::fs::read_to_string(node.cni_conf_dir().join("10-podnet.conflist")).expect("conflist");
    assert!(
        conflist.contains("redirect-cni"),
        "install-cni put no entry in: {conflist}"
    );
    assert!(
        node.cni_bin_dir().join("redirect-cni").exists(),
        "install-cni copied no plugin"
    );

    let seen = world(&node);
    let (name, uid) = (unique_name("hello-"), unique_name("uid-"));
    let object = recorded_pod("hello.yaml", "shop", &name, &uid, NODE);
    api.put(&object);
    let meshed_pod: k8s_openapi::api::core::v1::Pod =
        serde_json::from_value(object).expect("a Pod");
    let app = meshed_pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .expect("an app container")
        .name
        .clone();
    let mut overrides = HashMap::new();
    overrides.insert(
        "istio-proxy",
        Override {
            image: Some(image.clone()),
            command: Some(vec!["redirect-proxy".into()]),
            args: Some(["--log-format", "json"].map(str::to_owned).to_vec()),
            ..Override::default()
        },
    );
    // A new connection every 100 ms, each with its own token.
    let script = format!(
        "i=0; while :; do i=$((i+1)); echo conn-$i | nc -w 3 {GATEWAY} {WORLD_PORT} >/dev/null; sleep 0.1; done"
    );
    overrides.insert(
        app.as_str(),
        Override {
            image: Some(images::APP_IMAGE.into()),
            command: Some(vec!["/bin/sh".into(), "-c".into(), script]),
            args: Some(Vec::new()),
            ..Override::default()
        },
    );
    let meshed = kubelet
        .run(&meshed_pod, &overrides)
        .unwrap_or_else(|e| panic!("the meshed pod: {e}"));
    let netns = meshed.netns.clone().expect("a pod network namespace");
    assert!(
        netns.starts_with("/var/run/netns") || netns.starts_with("/run/netns"),
        "containerd named the namespace {}",
        netns.display()
    );

    // Enrolled before its containers started: ADD returned only once the daemon had it.
    let list = listed(&kubelet, &ds);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["pod"]["uid"], uid.as_str(), "{list:?}");
    assert_eq!(
        list[0]["pod"]["container_id"],
        meshed.sandbox.as_str(),
        "{list:?}"
    );
    let seen_at = Path::new("/run/netns").join(netns.file_name().expect("a file name"));
    assert_eq!(list[0]["netns"], seen_at.display().to_string(), "{list:?}");

    eventually(
        "ten connections through the proxy",
        Duration::from_secs(60),
        || {
            let records = proxied(&kubelet, &meshed);
            if records.len() >= 10 {
                return Ok(());
            }
            Err(format!("{records:?} {:?}", seen.lock().expect("seen")))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for r in proxied(&kubelet, &meshed) {
        assert_eq!(r["orig_dst"], format!("{GATEWAY}:{WORLD_PORT}"), "{r}");
        assert_eq!(r["cluster"], "PassthroughCluster", "{r}");
    }

    // The app stops (its last connection finishes), then every connection that reached the
    // world must have gone through the proxy.
    node.cri()
        .stop_container(meshed.container(&app), 0)
        .expect("stop the app");
    let both = || {
        (
            seen.lock().expect("seen").len(),
            proxied(&kubelet, &meshed).len(),
        )
    };
    eventually(
        "the proxy's record of every connection that reached the world",
        Duration::from_secs(20),
        || {
            let (reached, records) = both();
            if reached == records {
                Ok(())
            } else {
                Err(format!("reached {reached}, through the proxy {records}"))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}: {:?}", seen.lock().expect("seen")));

    // The kubelet removes the pod: containerd runs DEL (twice); the enrollment goes.
    kubelet.remove(&meshed).expect("remove the meshed pod");
    assert_eq!(
        listed(&kubelet, &ds),
        Vec::<Value>::new(),
        "after RemovePodSandbox"
    );
    kubelet.remove(&ds).expect("remove the DaemonSet's pod");
}
