//! CNI GC cannot empty a node (issue 31, finding 6): a GC whose configuration lists no valid
//! attachments is refused, the older `cni.dev/attachments` key counts as the list, and a pod
//! left off the list (a second runtime sharing the conflist, a hand-run `cnitool gc`) stays
//! enrolled while it is alive: GC removes only enrollments whose namespace is gone or whose pod
//! the watch saw deleted. Each step is checked with the pods' real traffic.
use std::time::Duration;

use redirect_testkit::{eventually, privileged, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost, Sandbox, GATEWAY},
    conformance::listen,
    node::Node,
};
use serde_json::{json, Value};

const NODE: &str = "node-gc";

fn listed(node: &Node) -> Vec<String> {
    let list: Vec<Value> =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json");
    let mut names: Vec<String> = list
        .iter()
        .map(|e| e["pod"]["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    names.sort();
    names
}

fn captured(node: &Node, pod: &Sandbox<'_>) -> bool {
    pod.outbound(node.cgroup.path()) == format!("at=proxy/[::]:15001 orig={GATEWAY}:80")
}

fn attachments(pods: &[&Sandbox<'_>]) -> Value {
    pods.iter()
        .map(|p| json!({"containerID": p.call.container_id, "ifname": "eth0"}))
        .collect()
}

#[test]
fn gc_removes_only_dead_pods_whatever_the_runtimes_list_says() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = node.pod_daemon(&api, Some(NODE), &[]).0;
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let (uid_a, uid_b) = (unique_name("uid"), unique_name("uid"));
    let object_a = recorded_pod("hello.yaml", "shop", "a-1", &uid_a, NODE);
    api.put(&object_a);
    api.put(&recorded_pod("hello.yaml", "shop", "b-1", &uid_b, NODE));
    let a = host.sandbox("shop", "a-1", &uid_a);
    let b = host.sandbox("shop", "b-1", &uid_b);
    let _world = host.world_listener();
    let mut proxies = Vec::new();
    for pod in [&a, &b] {
        let ran = pod.redirect_cni("ADD", &conf);
        assert!(ran.ok(), "ADD {:?}: {}", pod.call.pod, ran.text());
        proxies.push(listen(
            &pod.netns,
            Some(node.cgroup.path()),
            Some((1337, 1337)),
            "proxy",
            &["[::]:15001".into(), "[::]:15006".into()],
            &[],
        ));
    }
    assert_eq!(listed(&node), ["a-1", "b-1"]);
    let both_captured = || captured(&node, &a) && captured(&node, &b);
    assert!(both_captured());

    // No list at all: refused, nothing removed.
    let ran = host.redirect_cni("GC", &a.call, &conf, None);
    assert!(!ran.ok(), "a GC without the list: {}", ran.text());
    assert_eq!(ran.json["code"], 7, "{}", ran.text());
    assert!(
        ran.json["msg"]
            .as_str()
            .is_some_and(|m| m.contains("cni.dev/valid-attachments")),
        "{}",
        ran.text()
    );
    assert_eq!(listed(&node), ["a-1", "b-1"]);
    assert!(both_captured(), "a GC without the list uncaptured a pod");

    // The drafts' key names the list too.
    let mut gc = conf.clone();
    gc["cni.dev/attachments"] = attachments(&[&a, &b]);
    let ran = host.redirect_cni("GC", &a.call, &gc, None);
    assert!(ran.ok(), "GC with cni.dev/attachments: {}", ran.text());
    assert_eq!(listed(&node), ["a-1", "b-1"]);
    assert!(both_captured());

    // A list without a (a runtime that does not know it): a is alive, so it stays.
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = attachments(&[&b]);
    let ran = host.redirect_cni("GC", &a.call, &gc, None);
    assert!(ran.ok(), "GC: {}", ran.text());
    assert_eq!(listed(&node), ["a-1", "b-1"]);
    assert!(
        both_captured(),
        "a live pod left off the list was uncaptured"
    );

    // Once the watch saw a deleted, the same GC removes it.
    api.event("DELETED", &object_a);
    eventually(
        "GC to remove the deleted pod",
        Duration::from_secs(20),
        || {
            let ran = host.redirect_cni("GC", &a.call, &gc, None);
            match listed(&node) {
                l if l == ["b-1"] => Ok(()),
                l => Err(format!("{l:?}: {}", ran.text())),
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(captured(&node, &b));
    assert!(
        !captured(&node, &a),
        "a garbage-collected pod is still captured"
    );
}
