//! CNI DEL goes by the pod, not by the path (issue 31, finding 7): a DEL naming another pod
//! (its container id and uid) with a path that names a live pod's namespace now (a reused
//! `/proc/PID/ns/net`, a recycled name) leaves that pod enrolled and captured; its own DEL
//! removes it.
use redirect_testkit::{privileged, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost, GATEWAY},
    conformance::listen,
    node::Node,
};
use serde_json::Value;

const NODE: &str = "node-del";

#[test]
fn a_del_of_another_pod_naming_a_live_pods_namespace_removes_nothing() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = node.pod_daemon(&api, None, &[]).0;
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let uid = unique_name("uid");
    api.put(&recorded_pod("hello.yaml", "shop", "a-1", &uid, NODE));
    let a = host.sandbox("shop", "a-1", &uid);
    let _world = host.world_listener();
    let ran = a.redirect_cni("ADD", &conf);
    assert!(ran.ok(), "ADD: {}", ran.text());
    let _proxy = listen(
        &a.netns,
        Some(node.cgroup.path()),
        Some((1337, 1337)),
        "proxy",
        &["[::]:15001".into(), "[::]:15006".into()],
        &[],
    );
    let captured = format!("at=proxy/[::]:15001 orig={GATEWAY}:80");
    assert_eq!(a.outbound(node.cgroup.path()), captured);
    let listed = || -> Vec<Value> {
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
    };

    let mut other = a.call.clone();
    other.container_id = unique_name("sandbox-b");
    other.pod = ("shop".into(), "b-1".into(), unique_name("uid-b"));
    for round in 0..2 {
        let del = host.redirect_cni("DEL", &other, &conf, None);
        assert!(del.ok(), "DEL of b #{round}: {}", del.text());
        assert_eq!(listed().len(), 1, "b's DEL removed a");
        assert_eq!(a.outbound(node.cgroup.path()), captured, "a uncaptured");
    }
    let del = a.redirect_cni("DEL", &conf);
    assert!(del.ok(), "a's DEL: {}", del.text());
    assert_eq!(listed(), Vec::<Value>::new());
}
