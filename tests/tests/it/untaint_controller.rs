//! `redirect untaint-controller` against the recorded apiserver (issue 46, finding 7): it watches
//! only the DaemonSet's pods (its namespace's pods, by label selector) and removes the
//! readiness taint from the Node of each that is Ready: a merge patch of that Node's taints
//! less ours, carrying the resourceVersion read, every other taint kept. A pod not Ready yet
//! leaves its Node alone until it is; a Node without a pod of the DaemonSet (and a Ready pod of
//! another namespace) is never read. SIGTERM stops it cleanly.
use std::{process::Command, time::Duration};

use nix::sys::signal::Signal;
use redirect_testkit::{eventually, unique_name, Child};
use redirect_tests::{apiserver::PodServer, bin_path};
use serde_json::{json, Value};

const TAINT: &str = "redirect.dev/not-ready";

fn node(name: &str, version: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": version},
        "spec": {"taints": [
            {"key": "example.com/keep", "effect": "NoExecute"},
            {"key": TAINT, "value": "true", "effect": "NoSchedule"}]}})
}

fn daemon_pod(namespace: &str, name: &str, node: &str, ready: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "labels": {"app": "redirect"}},
        "spec": {"nodeName": node, "containers": [{"name": "redirect", "image": "x"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": if ready { "True" } else { "False" }}]}})
}

/// The PATCHes received so far, as (path, body).
fn patches(api: &PodServer) -> Vec<(String, Value)> {
    api.hits()
        .into_iter()
        .filter_map(|h| {
            let mut parts = h.splitn(3, ' ');
            (parts.next() == Some("PATCH")).then_some(())?;
            let path = parts.next()?.split('?').next()?.to_owned();
            Some((path, serde_json::from_str(parts.next()?).ok()?))
        })
        .collect()
}

#[test]
fn the_controller_untaints_the_node_of_each_ready_daemonset_pod_only() {
    let dir = std::env::temp_dir().join(unique_name("runtaint"));
    std::fs::create_dir_all(&dir).expect("the test's directory");
    let api = PodServer::start(&dir);
    for (name, version) in [("node-a", "11"), ("node-b", "12"), ("node-c", "13")] {
        api.put_object(&format!("/api/v1/nodes/{name}"), &node(name, version));
    }
    api.list(&daemon_pod("istio-system", "redirect-a", "node-a", true));
    api.list(&daemon_pod("istio-system", "redirect-b", "node-b", false));
    // Ready and labelled alike, but not in the DaemonSet's namespace.
    api.list(&daemon_pod("shop", "redirect-c", "node-c", true));

    let mut cmd = Command::new(bin_path("redirect"));
    cmd.args(["untaint-controller", "--kubeconfig"])
        .arg(api.kubeconfig())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info");
    let mut controller = Child::spawn("untaint-controller", cmd).expect("the controller");

    let sent = eventually("node-a's PATCH", Duration::from_secs(20), || {
        let p = patches(&api);
        if p.is_empty() {
            Err(api.hits())
        } else {
            Ok(p)
        }
    })
    .unwrap_or_else(|e| panic!("{e}\n{:?}", controller.stderr_lines()));
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].0, "/api/v1/nodes/node-a");
    assert_eq!(
        sent[0].1,
        json!({"metadata": {"resourceVersion": "11"},
               "spec": {"taints": [{"key": "example.com/keep", "effect": "NoExecute"}]}})
    );
    let hits = api.hits();
    assert!(
        hits.iter()
            .any(|h| h.starts_with("/api/v1/namespaces/istio-system/pods?")
                && h.contains("labelSelector=app%3Dredirect")),
        "the watch is of the DaemonSet's pods only: {hits:?}"
    );
    assert!(
        !hits
            .iter()
            .any(|h| h.contains("node-b") || h.contains("node-c")),
        "a Node without a Ready DaemonSet pod was read: {hits:?}"
    );
    controller
        .wait_stderr_line("the removal's log", Duration::from_secs(10), |l| {
            l.contains("removed the readiness taint") && l.contains("node-a")
        })
        .expect("logged");

    // node-b's pod becomes Ready: its Node loses the taint too; node-c is never touched.
    api.event(
        "MODIFIED",
        &daemon_pod("istio-system", "redirect-b", "node-b", true),
    );
    eventually("node-b's PATCH", Duration::from_secs(20), || {
        let p = patches(&api);
        (p.len() == 2).then_some(p.clone()).ok_or(p)
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let now = api.object("/api/v1/nodes/node-b").expect("node-b");
    assert_eq!(
        now["spec"]["taints"],
        json!([{"key": "example.com/keep", "effect": "NoExecute"}])
    );
    assert_eq!(
        api.object("/api/v1/nodes/node-c").expect("node-c")["spec"]["taints"],
        node("node-c", "13")["spec"]["taints"]
    );
    assert!(
        controller.stop(Signal::SIGTERM),
        "SIGTERM: {:?}",
        controller.stderr_lines()
    );
    assert!(
        !patches(&api).iter().any(|(p, _)| p.contains("node-c")),
        "{:?}",
        api.hits()
    );
    std::fs::remove_dir_all(&dir).expect("the test's directory removed");
}
