//! The daemon's reconcile of running pods, against a node laid out as a kubelet lays it out:
//! a pod sandbox from Debian's CNI plugins (no `redirect-cni` ran: the pod started before the
//! plugin was installed, or while the daemon was down), the pod's cgroups named as the kubelet's
//! systemd driver names them, its sandbox process in them, and the Pod (with its status) from a
//! local HTTP server replaying recorded API objects (no kube-apiserver can be installed here).
//! The daemon enrolls the running pod in place, binds the proxy uid/gid bypass to the running
//! istio-proxy container's cgroup, follows a proxy restart, and unenrolls the pod once the
//! apiserver deletes it. iptables-based capture cannot do the first without restarting the pod.
use std::time::{Duration, SystemTime};

use redirect_testkit::{eventually, privileged, Cgroup, Child};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, CniHost, GATEWAY},
    conformance::{listen, probe},
    node::Node,
};
use serde_json::{json, Value};

const NODE: &str = "node-reconcile";

/// A runtime-like 64-hex-digit id, unique in this run.
fn runtime_id(salt: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:032x}{:016x}{salt:016x}", std::process::id())
}

/// A pod uid as the apiserver makes them.
fn pod_uid() -> String {
    let id = runtime_id(0);
    format!(
        "{}-{}-{}-{}-{}",
        &id[24..32],
        &id[32..36],
        &id[36..40],
        &id[40..44],
        &id[44..56]
    )
}

/// `redirect list --json`.
fn listed(node: &Node) -> Vec<Value> {
    serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
}

/// Where a connect from `cgroup` as `uid` to the gateway's port 80 lands.
fn lands(pod: &redirect_testkit::Netns, cgroup: &Cgroup, uid: u32) -> String {
    probe(
        pod,
        Some(cgroup.path()),
        Some((uid, uid)),
        &[format!("tcp:{GATEWAY}:80")],
    )[0]
    .at()
}

/// The running pod as the apiserver reports it: addressed, its istio-proxy (a native sidecar)
/// and app containers running with their runtime ids.
fn running_pod(uid: &str, ip: &str, proxy: &str, app: &str) -> Value {
    let mut pod = recorded_pod("hello.yaml", "shop", "web-1", uid, NODE);
    pod["status"] = json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "initContainerStatuses": [{
            "name": "istio-proxy", "image": "istio/proxyv2", "imageID": "", "ready": true,
            "restartCount": 0, "containerID": format!("containerd://{proxy}"),
            "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
        }],
        "containerStatuses": [{
            "name": "hello", "image": "hello", "imageID": "", "ready": true,
            "restartCount": 0, "containerID": format!("containerd://{app}"),
            "state": {"running": {"startedAt": "2026-12-01T00:00:01Z"}}
        }]
    });
    pod
}

/// A process that stays (the sandbox's pause), in `netns`, moved into `cgroup`.
fn pause(ns: &redirect_testkit::Netns, cgroup: &Cgroup) -> Child {
    let mut cmd = ns.exec("sleep");
    cmd.arg("600");
    let child = Child::spawn("pause", cmd).expect("start the pause process");
    std::fs::write(cgroup.path().join("cgroup.procs"), child.pid().to_string())
        .expect("move the pause process into the sandbox's cgroup");
    child
}

fn wait_for(what: &str, node: &Node, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    eventually(what, Duration::from_secs(30), || {
        let list = listed(node);
        if check(&list) {
            Ok(list)
        } else {
            Err(list)
        }
    })
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_running_pod_is_enrolled_in_place_bound_to_its_proxy_and_unenrolled_when_deleted() {
    privileged!(redirect_tests::cni::plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let host = CniHost::new();
    let uid = pod_uid();
    let (sandbox, proxy, app) = (runtime_id(1), runtime_id(2), runtime_id(3));
    // The pod's network: the primary plugins only (redirect-cni never saw this pod).
    let pod = host.sandbox("shop", "web-1", &uid);
    let _world = host.world_listener();
    // The kubelet's cgroups (systemd driver) under the node's cgroup.
    let kubepods = node.cgroup.child("kubepods.slice").expect("cgroup");
    let burstable = kubepods.child("kubepods-burstable.slice").expect("cgroup");
    let pod_cg = burstable
        .child(&format!(
            "kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        ))
        .expect("cgroup");
    let sandbox_cg = pod_cg
        .child(&format!("cri-containerd-{sandbox}.scope"))
        .expect("cgroup");
    let app_cg = pod_cg
        .child(&format!("cri-containerd-{app}.scope"))
        .expect("cgroup");
    let proxy_cg = pod_cg
        .child(&format!("cri-containerd-{proxy}.scope"))
        .expect("cgroup");
    let _pause = pause(&pod.netns, &sandbox_cg);
    let proxy_listener = listen(
        &pod.netns,
        Some(proxy_cg.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    );
    let recorded = running_pod(&uid, &pod.ip(), &proxy, &app);
    api.list(&recorded);
    api.put(&recorded);
    // Not captured yet: nothing enrolled it.
    let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, &app_cg, 1000), direct);

    let kubeconfig = api.kubeconfig().display().to_string();
    let root = node.cgroup.path().display().to_string();
    let (_daemon, _) = node.daemon_with(&[
        "--kubeconfig",
        &kubeconfig,
        "--node-name",
        NODE,
        "--pod-cgroup-root",
        &root,
        "--reconcile-interval-secs",
        "1",
    ]);
    let list = wait_for("the running pod enrolled in place", &node, |l| {
        l.len() == 1 && l[0]["policy"]["proxy_cgroup"] != Value::Null
    });
    assert_eq!(
        list[0]["pod"],
        json!({"namespace": "shop", "name": "web-1", "uid": uid, "container_id": sandbox}),
        "{list:?}"
    );
    assert_eq!(list[0]["netns"], pod.netns.path().display().to_string());
    assert_eq!(
        list[0]["policy"]["proxy_cgroup"],
        proxy_cg.path().display().to_string()
    );
    let captured = format!("at=proxy/[::]:15001 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, &app_cg, 1000), captured, "the app");
    // The bypass is the proxy container's: uid 1337 there goes out, uid 1337 in the app's
    // container is captured like the app.
    assert_eq!(lands(&pod.netns, &proxy_cg, 1337), direct, "the proxy");
    assert_eq!(
        lands(&pod.netns, &app_cg, 1337),
        captured,
        "uid 1337 outside the proxy container"
    );

    // The runtime's CHECK of the sandbox agrees with what the daemon did in place.
    let mut call = pod.call.clone();
    call.container_id.clone_from(&sandbox);
    let conf = entry(&node.dir.join("daemon.sock"));
    let check = host.redirect_cni("CHECK", &call, &conf, Some(&pod.prev));
    assert!(
        check.ok(),
        "CHECK of the pod enrolled in place: {}",
        check.text()
    );

    // The proxy restarts: its cgroup goes (unbound: the bypass is istio-iptables' uid match
    // again), the new container's cgroup comes and the watch tells its id (bound again).
    drop(proxy_listener);
    drop(proxy_cg);
    wait_for("the bypass unbound from the gone container", &node, |l| {
        l.len() == 1 && l[0]["policy"]["proxy_cgroup"] == Value::Null
    });
    let proxy2 = runtime_id(4);
    let proxy2_cg = pod_cg
        .child(&format!("cri-containerd-{proxy2}.scope"))
        .expect("cgroup");
    let restarted = running_pod(&uid, &pod.ip(), &proxy2, &app);
    api.put(&restarted);
    api.event("MODIFIED", &restarted);
    wait_for("the bypass bound to the new proxy container", &node, |l| {
        l.len() == 1
            && l[0]["policy"]["proxy_cgroup"] == proxy2_cg.path().display().to_string().as_str()
    });
    let _proxy2 = listen(
        &pod.netns,
        Some(proxy2_cg.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    );
    assert_eq!(lands(&pod.netns, &app_cg, 1000), captured);
    assert_eq!(lands(&pod.netns, &proxy2_cg, 1337), direct);

    // The pod is deleted: the watch says so, a GET confirms it, the daemon unenrolls it.
    api.remove("shop", "web-1");
    api.event("DELETED", &restarted);
    wait_for("the deleted pod unenrolled", &node, <[Value]>::is_empty);
    assert_eq!(lands(&pod.netns, &app_cg, 1000), direct);
}
