//! The daemon's own removal of its node readiness taint (`redirect daemon --untaint
//! KEY:EFFECT`, for operators who grant the daemon nodes patch; the shipped manifests run the
//! untaint controller instead: `untaint_controller`), against the recorded apiserver: while the
//! node's conflist holds no redirect-cni entry the taint stays (no PATCH); once install-cni put
//! the entry in, the daemon PATCHes its Node with the taints less ours (another taint kept, the
//! resourceVersion it read carried).
use std::time::Duration;

use redirect_testkit::{eventually, privileged};
use redirect_tests::{
    apiserver::PodServer,
    install_dirs::{Dirs, BRIDGE},
    node::Node,
};
use serde_json::{json, Value};

const NODE_PATH: &str = "/api/v1/nodes/node-t";

#[test]
fn the_daemon_removes_its_nodes_readiness_taint_once_the_entry_is_in_place() {
    privileged!();
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    api.put_object(
        NODE_PATH,
        &json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-t", "resourceVersion": "41"},
            "spec": {"taints": [
                {"key": "redirect.dev/not-ready", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]}}),
    );
    let cni = Dirs::new();
    std::fs::write(cni.file("10-bridge.conflist"), BRIDGE).expect("the primary's conflist");
    let conf_dir = cni.conf.display().to_string();
    let (mut daemon, _) = node.pod_daemon(
        &api,
        Some("node-t"),
        &[
            "--untaint",
            "redirect.dev/not-ready:NoSchedule",
            "--cni-conf-dir",
            &conf_dir,
        ],
    );
    let patches = || -> Vec<String> {
        api.hits()
            .into_iter()
            .filter(|h| h.starts_with("PATCH "))
            .collect()
    };
    // The daemon serves, the entry is not there: it looks (debug log) and leaves the taint.
    daemon
        .wait_stderr_line("the untaint's first look", Duration::from_secs(20), |l| {
            l.contains("holds no redirect-cni entry yet")
        })
        .expect("the daemon looks at the conflist");
    assert_eq!(
        patches(),
        Vec::<String>::new(),
        "untainted before the entry was in place"
    );

    // install-cni puts the entry in: the taint goes, the other stays.
    cni.ok("install-cni", &[]);
    let sent = eventually("the taint's PATCH", Duration::from_secs(20), || {
        let p = patches();
        if p.is_empty() {
            Err(api.hits())
        } else {
            Ok(p)
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sent.len(), 1, "{sent:?}");
    let body: Value = serde_json::from_str(sent[0].splitn(3, ' ').nth(2).expect("a body"))
        .expect("a JSON merge patch");
    assert_eq!(body["metadata"]["resourceVersion"], "41", "{body}");
    assert_eq!(
        body["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        "{body}"
    );
    let now = api.object(NODE_PATH).expect("the node");
    assert_eq!(
        now["spec"]["taints"].as_array().map(Vec::len),
        Some(1),
        "{now}"
    );
    let logged = daemon
        .wait_stderr_line("the untaint's log", Duration::from_secs(10), |l| {
            l.contains("removed the readiness taint")
        })
        .expect("logged");
    assert!(logged.contains("node-t"), "{logged}");
}
