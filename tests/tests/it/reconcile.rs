//! The daemon's reconcile of running pods, against a node laid out as a kubelet lays it out:
//! a pod sandbox from Debian's CNI plugins (no `redirect-cni` ran: the pod started before the
//! plugin was installed, or while the daemon was down), the pod's cgroups named as the kubelet's
//! systemd driver names them, its sandbox process in them, and the Pod (with its status) from a
//! local HTTP server replaying recorded API objects (no kube-apiserver can be installed here).
//! The daemon enrolls the running pod in place, binds the proxy uid/gid bypass to the running
//! istio-proxy container's cgroup, closes it while the proxy is gone and binds the restarted
//! one, and unenrolls the pod once the
//! apiserver deletes it. iptables-based capture cannot do the first without restarting the pod.
use std::time::{Duration, SystemTime};

use redirect_testkit::{eventually, privileged, Cgroup, Child};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, CniHost, Sandbox, GATEWAY},
    conformance::{listen, probe},
    node::Node,
};
use serde_json::{json, Value};

pub(crate) const NODE: &str = "node-reconcile";

/// A runtime-like 64-hex-digit id, unique in this run.
pub(crate) fn runtime_id(salt: u64) -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:032x}{:016x}{salt:016x}", std::process::id())
}

/// A pod uid as the apiserver makes them.
pub(crate) fn pod_uid() -> String {
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
pub(crate) fn listed(node: &Node) -> Vec<Value> {
    serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
}

/// Where a connect from `cgroup` as `uid` to the gateway's port 80 lands.
pub(crate) fn lands(pod: &redirect_testkit::Netns, cgroup: &Cgroup, uid: u32) -> String {
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
pub(crate) fn running_pod(uid: &str, ip: &str, proxy: &str, app: &str) -> Value {
    pod_status(uid, ip, Some(proxy), app)
}

/// The pod as the apiserver reports it, its istio-proxy running (with its runtime id) or
/// still waiting to start.
pub(crate) fn pod_status(uid: &str, ip: &str, proxy: Option<&str>, app: &str) -> Value {
    let mut pod = recorded_pod("hello.yaml", "shop", "web-1", uid, NODE);
    let proxy_state = match proxy {
        Some(_) => json!({"running": {"startedAt": "2026-12-01T00:00:00Z"}}),
        None => json!({"waiting": {"reason": "ContainerCreating"}}),
    };
    pod["status"] = json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "initContainerStatuses": [{
            "name": "istio-proxy", "image": "istio/proxyv2", "imageID": "",
            "ready": proxy.is_some(), "restartCount": 0,
            "containerID": proxy.map(|p| format!("containerd://{p}")),
            "state": proxy_state
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
pub(crate) fn pause(ns: &redirect_testkit::Netns, cgroup: &Cgroup) -> Child {
    let mut cmd = ns.exec("sleep");
    cmd.arg("600");
    let child = Child::spawn("pause", cmd).expect("start the pause process");
    std::fs::write(cgroup.path().join("cgroup.procs"), child.pid().to_string())
        .expect("move the pause process into the sandbox's cgroup");
    child
}

/// One pod's cgroups as the kubelet's systemd driver names them, under the node's cgroup,
/// with its sandbox's pause process (fields drop children first).
pub(crate) struct PodCgroups {
    _pause: Child,
    _sandbox: Cgroup,
    pub(crate) app: Cgroup,
    pub(crate) proxy: Option<Cgroup>,
    pub(crate) pod: Cgroup,
    _burstable: Cgroup,
    _kubepods: Cgroup,
}

impl PodCgroups {
    pub(crate) fn new(
        node: &Node,
        netns: &redirect_testkit::Netns,
        uid: &str,
        ids: [&str; 3],
    ) -> Self {
        let [sandbox, proxy, app] = ids;
        let kubepods = node.cgroup.child("kubepods.slice").expect("cgroup");
        let burstable = kubepods.child("kubepods-burstable.slice").expect("cgroup");
        let pod = burstable
            .child(&format!(
                "kubepods-burstable-pod{}.slice",
                uid.replace('-', "_")
            ))
            .expect("cgroup");
        let scope = |id: &str| {
            pod.child(&format!("cri-containerd-{id}.scope"))
                .expect("cgroup")
        };
        let (sandbox, proxy, app) = (scope(sandbox), scope(proxy), scope(app));
        Self {
            _pause: pause(netns, &sandbox),
            _sandbox: sandbox,
            app,
            proxy: Some(proxy),
            pod,
            _burstable: burstable,
            _kubepods: kubepods,
        }
    }
}

/// The daemon of `node` with the recorded apiserver of `api`, reconciling every second.
pub(crate) fn daemon(node: &Node, api: &PodServer, extra: &[&str]) -> Child {
    let kubeconfig = api.kubeconfig().display().to_string();
    let root = node.cgroup.path().display().to_string();
    let mut args = vec![
        "--kubeconfig",
        &kubeconfig,
        "--node-name",
        NODE,
        "--pod-cgroup-root",
        &root,
        "--reconcile-interval-secs",
        "1",
    ];
    args.extend_from_slice(extra);
    node.daemon_with(&args).0
}

pub(crate) fn wait_for(what: &str, node: &Node, check: impl Fn(&[Value]) -> bool) -> Vec<Value> {
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

/// A running meshed pod that no CNI ADD enrolled: its network from the primary plugins only
/// (the pod started before the plugin was installed, or while the daemon was down), its
/// kubelet cgroups, its proxy listening as uid 1337 in its container, the world listener at
/// the gateway, and the recorded apiserver the daemon will read it from (fields drop first
/// what lives inside the later ones).
pub(crate) struct Meshed<'h> {
    pub(crate) proxy: Option<Child>,
    pub(crate) cgroups: PodCgroups,
    _world: Child,
    pub(crate) pod: Sandbox<'h>,
    pub(crate) api: PodServer,
    pub(crate) node: Node,
    pub(crate) uid: String,
    /// The runtime ids of the sandbox, the proxy and the app containers.
    pub(crate) ids: [String; 3],
}

impl<'h> Meshed<'h> {
    pub(crate) fn new(host: &'h CniHost) -> Self {
        Self::with_ids(host, [runtime_id(1), runtime_id(2), runtime_id(3)])
    }

    /// [`Self::new`] with the runtime ids of the sandbox, the proxy and the app containers.
    pub(crate) fn with_ids(host: &'h CniHost, ids: [String; 3]) -> Self {
        let node = Node::new();
        let api = PodServer::start(&node.dir.join("api"));
        let uid = pod_uid();
        let pod = host.sandbox("shop", "web-1", &uid);
        let world = host.world_listener();
        let cgroups = PodCgroups::new(&node, &pod.netns, &uid, [&ids[0], &ids[1], &ids[2]]);
        let proxy_cg = cgroups.proxy.as_ref().expect("the proxy's cgroup");
        let proxy = proxy_listener(&pod.netns, proxy_cg);
        Self {
            proxy: Some(proxy),
            cgroups,
            _world: world,
            pod,
            api,
            node,
            uid,
            ids,
        }
    }

    /// The pod's proxy container's cgroup (while it has one).
    pub(crate) fn proxy_cg(&self) -> &Cgroup {
        self.cgroups.proxy.as_ref().expect("the proxy's cgroup")
    }

    /// The pod as the apiserver reports it, its proxy running or not, in its list and GET.
    pub(crate) fn report(&self, proxy_running: bool) -> Value {
        self.report_edited(proxy_running, |_| {})
    }

    /// [`Self::report`] of the pod as `edit` changes it.
    pub(crate) fn report_edited(
        &self,
        proxy_running: bool,
        edit: impl FnOnce(&mut Value),
    ) -> Value {
        let [_, proxy, app] = &self.ids;
        let mut pod = pod_status(
            &self.uid,
            &self.pod.ip(),
            proxy_running.then_some(proxy.as_str()),
            app,
        );
        edit(&mut pod);
        self.api.list(&pod);
        self.api.put(&pod);
        pod
    }

    /// The daemon reading this pod's apiserver (see [`daemon`]).
    pub(crate) fn daemon(&self, extra: &[&str]) -> Child {
        daemon(&self.node, &self.api, extra)
    }
}

/// A proxy listening on 15001 and 15006 as uid 1337 in `cgroup`.
fn proxy_listener(netns: &redirect_testkit::Netns, cgroup: &Cgroup) -> Child {
    listen(
        netns,
        Some(cgroup.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    )
}

#[test]
fn a_running_pod_is_enrolled_in_place_bound_to_its_proxy_and_unenrolled_when_deleted() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let mut m = Meshed::new(&host);
    let (node, pod, app_cg) = (&m.node, &m.pod, &m.cgroups.app);
    m.report(true);
    // Not captured yet: nothing enrolled it.
    let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, app_cg, 1000), direct);

    let _daemon = m.daemon(&[]);
    let list = wait_for("the running pod enrolled in place", node, |l| {
        l.len() == 1 && l[0]["policy"]["proxy_cgroup"] != Value::Null
    });
    assert_eq!(
        list[0]["pod"],
        json!({"namespace": "shop", "name": "web-1", "uid": m.uid, "container_id": m.ids[0]}),
        "{list:?}"
    );
    assert_eq!(list[0]["netns"], pod.netns.path().display().to_string());
    let proxy_cg = m.proxy_cg();
    assert_eq!(
        list[0]["policy"]["proxy_cgroup"],
        proxy_cg.path().display().to_string()
    );
    let captured = format!("at=proxy/[::]:15001 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, app_cg, 1000), captured, "the app");
    // The bypass is the proxy container's: uid 1337 there goes out, uid 1337 in the app's
    // container is captured like the app.
    assert_eq!(lands(&pod.netns, proxy_cg, 1337), direct, "the proxy");
    assert_eq!(
        lands(&pod.netns, app_cg, 1337),
        captured,
        "uid 1337 outside the proxy container"
    );

    // The runtime's CHECK of the sandbox agrees with what the daemon did in place.
    let mut call = pod.call.clone();
    call.container_id.clone_from(&m.ids[0]);
    let conf = entry(&node.dir.join("daemon.sock"));
    let check = host.redirect_cni("CHECK", &call, &conf, Some(&pod.prev));
    assert!(
        check.ok(),
        "CHECK of the pod enrolled in place: {}",
        check.text()
    );

    // The proxy exits (any container can make it: POST 127.0.0.1:15000/quitquitquit): its
    // cgroup goes and the bypass closes (issue 31, finding 3): bound to no cgroup, uid 1337
    // anywhere in the pod is captured like the app (and refused: no proxy listens) instead of
    // going out as istio-iptables' owner match would let it, for the restart back-off or for
    // good.
    drop(m.proxy.take());
    drop(m.cgroups.proxy.take());
    let (node, pod, app_cg) = (&m.node, &m.pod, &m.cgroups.app);
    wait_for("the bypass closed when its container went", node, |l| {
        l.len() == 1
            && l[0]["policy"]["proxy_cgroup"] == Value::Null
            && l[0]["policy"]["proxy_bypass_closed"] == true
    });
    let escaped = probe(
        &pod.netns,
        Some(app_cg.path()),
        Some((1337, 1337)),
        &[format!("tcp:{GATEWAY}:80")],
    );
    assert!(
        !escaped[0].ok && escaped[0].at() != direct,
        "uid 1337 went out while the pod had no proxy: {}",
        escaped[0].outcome()
    );
    // The new proxy container's cgroup comes, its proxy runs and the watch tells its id
    // (bound again).
    let proxy2 = runtime_id(4);
    let proxy2_cg = m
        .cgroups
        .pod
        .child(&format!("cri-containerd-{proxy2}.scope"))
        .expect("cgroup");
    let _proxy2 = proxy_listener(&pod.netns, &proxy2_cg);
    let restarted = running_pod(&m.uid, &pod.ip(), &proxy2, &m.ids[2]);
    m.api.put(&restarted);
    m.api.event("MODIFIED", &restarted);
    wait_for("the bypass bound to the new proxy container", node, |l| {
        l.len() == 1
            && l[0]["policy"]["proxy_cgroup"] == proxy2_cg.path().display().to_string().as_str()
    });
    assert_eq!(lands(&pod.netns, app_cg, 1000), captured);
    assert_eq!(lands(&pod.netns, &proxy2_cg, 1337), direct);

    // The pod is deleted: the watch says so, a GET confirms it, the daemon unenrolls it.
    m.api.remove("shop", "web-1");
    m.api.event("DELETED", &restarted);
    wait_for("the deleted pod unenrolled", node, <[Value]>::is_empty);
    assert_eq!(lands(&pod.netns, app_cg, 1000), direct);
}

/// `--strict-proxy-binding` (issue 31, finding 3): a pod enrolled before its istio-proxy runs
/// starts with the bypass closed, so uid 1337 in any of its containers (an init container, an
/// app that starts first, the proxy's own container before the watch reports it) is captured;
/// once the watch reports the proxy running, its container alone goes out.
#[test]
fn a_strict_node_keeps_the_bypass_closed_until_the_proxy_container_runs() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let m = Meshed::new(&host);
    let (node, pod, proxy_cg, app_cg) = (&m.node, &m.pod, m.proxy_cg(), &m.cgroups.app);
    // The proxy's container exists and listens, but the kubelet has not reported it running.
    m.report(false);

    let _daemon = m.daemon(&["--strict-proxy-binding"]);
    let list = wait_for("the pod enrolled in place, its bypass closed", node, |l| {
        l.len() == 1
    });
    assert_eq!(list[0]["policy"]["proxy_bypass_closed"], true, "{list:?}");
    assert_eq!(list[0]["policy"]["proxy_cgroup"], Value::Null, "{list:?}");
    let captured = format!("at=proxy/[::]:15001 orig={GATEWAY}:80");
    for (cgroup, who) in [
        (app_cg, "the app's container"),
        (proxy_cg, "the proxy's container"),
    ] {
        assert_eq!(
            lands(&pod.netns, cgroup, 1337),
            captured,
            "uid 1337 in {who}"
        );
    }

    let running = m.report(true);
    m.api.event("MODIFIED", &running);
    wait_for("the bypass bound to the running proxy", node, |l| {
        l.len() == 1
            && l[0]["policy"]["proxy_cgroup"] == proxy_cg.path().display().to_string().as_str()
    });
    let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, proxy_cg, 1337), direct, "the proxy");
    assert_eq!(
        lands(&pod.netns, app_cg, 1337),
        captured,
        "uid 1337 in the app"
    );
}
