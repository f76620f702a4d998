//! The CNI chain as a runtime runs it (environment + stdin, spec 1.0.0): Debian's loopback and
//! bridge (host-local IPAM) give a fresh netns its address, then `redirect-cni` hands the pod
//! to a real daemon, which GETs it from the apiserver with its real kube-rs client. No
//! kube-apiserver can be installed here: a local HTTP server replays recorded Pod objects
//! built from the vendored kube-inject manifests, migrated to what Istio's injector emits with
//! istio-cni enabled (istio-proxy a native sidecar, no istio-init).
use std::time::Duration;

use redirect_testkit::{eventually, privileged, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost, Sandbox, GATEWAY},
    conformance::listen,
    node::Node,
};
use serde_json::{json, Value};

const NODE: &str = "node-cni";

/// `redirect list --json` of the node.
fn listed(node: &Node) -> Vec<Value> {
    serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
}

/// Where a TCP connect from the pod's app (uid 1000) to the gateway's port 80 lands.
fn outbound(node: &Node, pod: &Sandbox<'_>) -> String {
    pod.outbound(node.cgroup.path())
}

/// prevResult as redirect-cni must print it: unchanged (the bridge's result carries its
/// cniVersion already).
fn assert_passed_through(ran: &redirect_tests::cni::Run, pod: &Sandbox<'_>) {
    assert!(ran.ok(), "ADD {:?}: {}", pod.call.pod, ran.text());
    assert_eq!(ran.json, pod.prev, "ADD must print prevResult unchanged");
}

/// A daemon of the node reading pods from `api`, retrying a GET `attempts` times 100 ms apart.
fn daemon(node: &Node, api: &PodServer, attempts: u32) -> redirect_testkit::Child {
    let attempts = attempts.to_string();
    let extra = [
        "--pod-get-attempts",
        &attempts,
        "--pod-get-interval-ms",
        "100",
    ];
    node.pod_daemon(api, Some(NODE), &extra).0
}

#[test]
fn cni_chain_enrolls_meshed_pods_and_fails_closed() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = daemon(&node, &api, 3);
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();

    // A meshed pod: enrolled before ADD returns, listed with its pod, its outbound captured.
    let uid = unique_name("uid");
    api.put(&recorded_pod("hello.yaml", "shop", "hello-1", &uid, NODE));
    let pod = host.sandbox("shop", "hello-1", &uid);
    // The bridge (and its gateway address) exists from the first sandbox on.
    let _world = host.world_listener();
    let ran = pod.redirect_cni("ADD", &conf);
    assert_passed_through(&ran, &pod);
    let list = listed(&node);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["netns"], pod.netns.path().display().to_string());
    assert_eq!(
        list[0]["pod"],
        json!({"namespace": "shop", "name": "hello-1", "uid": uid, "container_id": pod.call.container_id}),
        "{list:?}"
    );
    assert_eq!(list[0]["addrs"][0], pod.ip(), "{list:?}");
    let _proxy = listen(
        &pod.netns,
        Some(node.cgroup.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    );
    assert_eq!(
        outbound(&node, &pod),
        format!("at=proxy/[::]:15001 orig={GATEWAY}:80")
    );
    let check = pod.redirect_cni("CHECK", &conf);
    assert!(check.ok(), "CHECK: {}", check.text());

    // DEL removes the enrollment (the pod's traffic goes where it was sent); twice is fine.
    for round in 0..2 {
        let del = pod.redirect_cni("DEL", &conf);
        assert!(del.ok(), "DEL #{round}: {}", del.text());
        assert_eq!(listed(&node), Vec::<Value>::new(), "after DEL #{round}");
    }
    assert_eq!(
        outbound(&node, &pod),
        format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80")
    );
    let check = pod.redirect_cni("CHECK", &conf);
    assert!(
        !check.ok(),
        "CHECK of a meshed pod not enrolled must fail: {}",
        check.text()
    );

    // inject=false: the daemon reads it, leaves it alone, ADD passes prevResult through.
    let mut optout = recorded_pod("hello.yaml", "shop", "optout-1", "uid-optout", NODE);
    optout["metadata"]["labels"]["sidecar.istio.io/inject"] = "false".into();
    api.put(&optout);
    let pod2 = host.sandbox("shop", "optout-1", "uid-optout");
    assert_passed_through(&pod2.redirect_cni("ADD", &conf), &pod2);
    assert!(api
        .hits()
        .contains(&"/api/v1/namespaces/shop/pods/optout-1".to_owned()));
    assert_eq!(listed(&node), Vec::<Value>::new(), "inject=false enrolled");

    // kube-system is excluded before any call: never asked for, never enrolled, although
    // the recorded pod would be meshed.
    api.put(&recorded_pod(
        "hello.yaml",
        "kube-system",
        "dns-1",
        "uid-dns",
        NODE,
    ));
    let pod3 = host.sandbox("kube-system", "dns-1", "uid-dns");
    assert_passed_through(&pod3.redirect_cni("ADD", &conf), &pod3);
    assert!(
        !api.hits().iter().any(|h| h.contains("kube-system")),
        "{:?}",
        api.hits()
    );
    assert_eq!(listed(&node), Vec::<Value>::new(), "kube-system enrolled");

    // An invalid annotation fails ADD naming it; nothing is enrolled.
    let annotation = "traffic.sidecar.istio.io/excludeInboundPorts";
    let mut bad = recorded_pod("hello.yaml", "shop", "bad-1", "uid-bad", NODE);
    bad["metadata"]["annotations"][annotation] = "15001,not-a-port".into();
    api.put(&bad);
    let pod4 = host.sandbox("shop", "bad-1", "uid-bad");
    let ran = pod4.redirect_cni("ADD", &conf);
    assert!(
        !ran.ok(),
        "ADD of a pod with a bad annotation: {}",
        ran.text()
    );
    assert_eq!(ran.json["cniVersion"], "1.0.0", "{}", ran.text());
    assert_eq!(ran.json["code"], 100, "{}", ran.text());
    let said = format!("{} {}", ran.json["msg"], ran.json["details"]);
    assert!(
        said.contains("shop/bad-1") && said.contains(annotation) && said.contains("not-a-port"),
        "{said}"
    );
    assert_eq!(listed(&node), Vec::<Value>::new(), "a refused pod enrolled");

    // A pod the apiserver does not have fails ADD after the bounded retries.
    let ghost = host.sandbox("shop", "ghost-1", "uid-ghost");
    let ran = ghost.redirect_cni("ADD", &conf);
    assert!(!ran.ok(), "ADD of an unknown pod: {}", ran.text());
    let said = ran.json["details"].as_str().unwrap_or_default().to_owned();
    assert!(
        said.contains("3 time(s)") && said.contains("ghost-1"),
        "{said}"
    );

    // STATUS answers (GC: `cni_gc.rs`).
    let status = pod.redirect_cni("STATUS", &conf);
    assert!(status.ok(), "STATUS: {}", status.text());
}

#[test]
fn cni_add_fails_closed_without_the_daemon() {
    privileged!(plugins_missing());
    // A daemon directory where no daemon runs: ADD of a pod fails, naming the pod and the
    // socket; STATUS says the plugin is not available; DEL succeeds (nothing is held).
    let node = Node::new();
    std::fs::create_dir_all(&node.dir).expect("daemon dir");
    let socket = node.dir.join("daemon.sock");
    let conf = entry(&socket);
    let host = CniHost::new();
    let pod = host.sandbox("shop", "hello-1", "uid-1");
    let ran = pod.redirect_cni("ADD", &conf);
    assert!(!ran.ok(), "ADD without a daemon: {}", ran.text());
    assert_eq!(ran.json["code"], 11, "{}", ran.text());
    let said = format!("{} {}", ran.json["msg"], ran.json["details"]);
    assert!(
        said.contains("shop/hello-1")
            && said.contains("fail closed")
            && said.contains(&socket.display().to_string()),
        "{said}"
    );
    let status = pod.redirect_cni("STATUS", &conf);
    assert!(!status.ok(), "STATUS without a daemon: {}", status.text());
    assert_eq!(status.json["code"], 50, "{}", status.text());
    let del = pod.redirect_cni("DEL", &conf);
    assert!(del.ok(), "DEL without a daemon: {}", del.text());
    let version = pod.redirect_cni("VERSION", &conf);
    assert!(version.ok(), "VERSION: {}", version.text());
    assert_eq!(
        version.json,
        json!({"cniVersion": "1.0.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
    // The plugin logs beside the socket, never on stdout, and counts each unreachable ADD
    // there under a lock: 20 at once (the kubelet starts pods in parallel) all count.
    let log = std::fs::read_to_string(node.dir.join("cni.log")).expect("cni.log");
    assert!(
        log.contains("hello-1") && log.contains("unreachable_total=1"),
        "{log}"
    );
    let count = || std::fs::read_to_string(node.dir.join("cni-add-unreachable")).expect("count");
    assert_eq!(count(), "1\n");
    std::thread::scope(|s| {
        for _ in 0..20 {
            s.spawn(|| assert!(!pod.redirect_cni("ADD", &conf).ok()));
        }
    });
    assert_eq!(count(), "21\n");
    // A socket left by a killed daemon: ADD is refused at connect (fail closed), DEL does not
    // wait for a daemon that is not running.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("a stale socket"));
    let ran = pod.redirect_cni("ADD", &conf);
    assert!(!ran.ok(), "ADD with a stale socket: {}", ran.text());
    assert_eq!(ran.json["code"], 11, "{}", ran.text());
    let del = pod.redirect_cni("DEL", &conf);
    assert!(del.ok(), "DEL with a stale socket: {}", del.text());
    // The daemon, back, exports the count; `redirect status` says it.
    std::fs::remove_file(&socket).expect("remove the stale socket");
    let (_daemon, ready) = node.daemon_with(&["--metrics", "127.0.0.1:0"]);
    let text = redirect_tests::http::scrape(&redirect_tests::node::metrics_addr(&ready));
    assert!(
        text.contains("\nredirect_cni_add_unreachable_total 22\n"),
        "{text}"
    );
    let status = node.ok(&["status"]);
    assert!(
        status.contains("22 CNI ADD(s) found the daemon unreachable"),
        "{status}"
    );
}

#[test]
fn cni_pods_come_from_the_node_watch() {
    privileged!(plugins_missing());
    // Pods known only from the list and the watch stream of this node (never served by a
    // GET): the daemon's watch cache answers ADD; a MODIFIED event counts, a DELETED pod is
    // gone (its ADD fails at once, without a GET).
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    api.list(&recorded_pod(
        "hello.yaml",
        "shop",
        "listed-1",
        "uid-l1",
        NODE,
    ));
    api.event(
        "ADDED",
        &recorded_pod("hello.yaml", "shop", "watched-1", "uid-w1", NODE),
    );
    let mut optout = recorded_pod("hello.yaml", "shop", "changed-1", "uid-c1", NODE);
    api.event("ADDED", &optout);
    optout["metadata"]["labels"]["sidecar.istio.io/inject"] = "false".into();
    api.event("MODIFIED", &optout);
    let deleted = recorded_pod("hello.yaml", "shop", "deleted-1", "uid-d1", NODE);
    api.event("ADDED", &deleted);
    api.event("DELETED", &deleted);
    let _daemon = daemon(&node, &api, 30);
    let watching = |h: &String| {
        h.starts_with("/api/v1/pods?")
            && h.contains("watch=true")
            && h.contains(&format!("fieldSelector=spec.nodeName%3D{NODE}"))
    };
    // The watch request follows the listing: from then on the listed pod is cached.
    eventually(
        "the daemon to watch this node's pods",
        Duration::from_secs(20),
        || {
            let hits = api.hits();
            if hits.iter().any(watching) {
                Ok(())
            } else {
                Err(hits)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    for name in ["listed-1", "watched-1"] {
        let uid = format!("uid-{}1", &name[..1]);
        let pod = host.sandbox("shop", name, &uid);
        assert_passed_through(&pod.redirect_cni("ADD", &conf), &pod);
        let list = listed(&node);
        assert!(
            list.iter().any(|e| e["pod"]["name"] == name),
            "{name} not enrolled: {list:?}"
        );
        assert!(pod.redirect_cni("DEL", &conf).ok());
    }
    let changed = host.sandbox("shop", "changed-1", "uid-c1");
    assert_passed_through(&changed.redirect_cni("ADD", &conf), &changed);
    assert_eq!(
        listed(&node),
        Vec::<Value>::new(),
        "inject=false (MODIFIED) enrolled"
    );
    let gone = host.sandbox("shop", "deleted-1", "uid-d1");
    let ran = gone.redirect_cni("ADD", &conf);
    assert!(!ran.ok(), "ADD of a deleted pod: {}", ran.text());
    // At once: the watch said so, and no GET would bring it back; code 11, "try again later"
    // (the runtime's retry meets the pod's replacement, or gives up).
    assert!(ran.text().contains("was deleted"), "{}", ran.text());
    assert_eq!(ran.json["code"], 11, "{}", ran.text());
    let hits = api.hits();
    assert!(
        !hits.iter().any(|h| h.contains("/pods/deleted-1")),
        "a pod the watch saw deleted was read with a GET: {hits:?}"
    );
    assert!(
        hits.iter().any(|h| h.starts_with("/api/v1/pods?")
            && h.contains("watch=true")
            && h.contains(&format!("fieldSelector=spec.nodeName%3D{NODE}"))),
        "no watch of this node's pods: {hits:?}"
    );
    assert!(
        !hits
            .iter()
            .any(|h| h.contains("/pods/listed-1") || h.contains("/pods/watched-1")),
        "a cached pod was read with a GET: {hits:?}"
    );
}
