//! A pod lives as long as its sandbox, not as one of its processes (issue 31, finding 7): a
//! runtime that names the pod's namespace by a process (`CNI_NETNS=/proc/PID/ns/net`, as
//! cri-dockerd names a sandbox by its pause process) leaves a path that stops naming the
//! namespace when that process exits. While the sandbox still runs (another of its processes,
//! or the runtime's name for it), the pod stays enrolled and captured, followed under that
//! other name; before, the next tick took the path's end for the namespace's and unenrolled it.
use std::time::Duration;

use redirect_testkit::{privileged, unique_name, Child};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost, GATEWAY},
    conformance::listen,
    node::Node,
};
use serde_json::Value;

const NODE: &str = "node-proc";

#[test]
fn a_pod_named_by_a_process_stays_enrolled_when_that_process_exits() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let mut daemon = node.pod_daemon(&api, None, &[]).0;
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let uid = unique_name("uid");
    api.put(&recorded_pod("hello.yaml", "shop", "a-1", &uid, NODE));
    let a = host.sandbox("shop", "a-1", &uid);
    let _world = host.world_listener();
    let sleeper = |name: &str| {
        let mut cmd = a.netns.exec("sleep");
        cmd.arg("600");
        Child::spawn(name, cmd).expect("a process in the sandbox")
    };
    // The process the runtime names the namespace by, and another of the sandbox's.
    let named = sleeper("named");
    let _pause = sleeper("pause");
    let mut call = a.call.clone();
    call.netns = format!("/proc/{}/ns/net", named.pid()).into();
    let ran = host.redirect_cni("ADD", &call, &conf, Some(&a.prev));
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
    assert_eq!(listed()[0]["netns"], call.netns.display().to_string());

    // The named process exits; the sandbox runs on.
    drop(named);
    daemon
        .wait_stderr_line(
            "the pod followed under its other name",
            Duration::from_secs(30),
            |l| l.contains("followed under its other name"),
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    let list = listed();
    assert_eq!(list.len(), 1, "the live pod was unenrolled: {list:?}");
    assert_ne!(
        list[0]["netns"],
        call.netns.display().to_string(),
        "{list:?}"
    );
    assert_eq!(a.outbound(node.cgroup.path()), captured, "uncaptured");

    let del = host.redirect_cni("DEL", &call, &conf, None);
    assert!(del.ok(), "DEL: {}", del.text());
    assert_eq!(listed(), Vec::<Value>::new());
}
