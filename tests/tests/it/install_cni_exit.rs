//! What `install-cni --watch --daemonset NS/NAME` does with our entry when it stops, decided
//! by what the apiserver says (the recorded-object server; no kube-apiserver can run here):
//! the DaemonSet exists and selects the node (an upgrade) keeps it; the DaemonSet gone, being
//! deleted or no longer selecting the node removes it; an apiserver that cannot be reached
//! keeps it. Each decision is logged with its reason.
use std::{process::Command, time::Duration};

use redirect_testkit::{eventually, Child};
use redirect_tests::{
    apiserver::PodServer,
    bin_path,
    install_dirs::{default_entry, read, Dirs, BRIDGE},
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);
const DS_PATH: &str = "/apis/apps/v1/namespaces/istio-system/daemonsets/redirect";
const NODE_PATH: &str = "/api/v1/nodes/node-1";

fn daemonset(node_selector: Value, deleting: bool) -> Value {
    let mut ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "redirect", "namespace": "istio-system"},
        "spec": {"selector": {"matchLabels": {"app": "redirect"}},
                 "template": {"metadata": {"labels": {"app": "redirect"}},
                              "spec": {"containers": [], "nodeSelector": node_selector}}}});
    if deleting {
        ds["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z".into();
    }
    ds
}

/// Installs through a watcher asking `kubeconfig`, stops it: whether the entry stayed, and
/// the watcher's log.
fn stop_with(kubeconfig: &str) -> (bool, String) {
    let d = Dirs::new();
    let list = d.file("10-bridge.conflist");
    std::fs::write(&list, BRIDGE).expect("write");
    let mut c = Command::new(bin_path("redirect"));
    c.arg("install-cni")
        .args(d.args())
        .args([
            "--watch",
            "--daemonset",
            "istio-system/redirect",
            "--node-name",
            "node-1",
        ])
        .args(["--kubeconfig", kubeconfig])
        .env_remove("KUBERNETES_SERVICE_HOST");
    let mut w = Child::spawn("install-cni --watch", c).expect("start the watcher");
    let has_entry = || {
        serde_json::from_str::<Value>(&read(&list))
            .ok()
            .is_some_and(|v| {
                v["plugins"]
                    .as_array()
                    .is_some_and(|p| p.contains(&default_entry()))
            })
    };
    eventually("installed", WAIT, || has_entry().then_some(()).ok_or(()))
        .unwrap_or_else(|e| panic!("{e}"));
    let status = w.terminate(WAIT).expect("exit");
    assert!(status.success(), "{status:?}: {:?}", w.stderr_lines());
    let kept = has_entry() && d.plugin().exists();
    if !kept {
        assert_eq!(read(&list), BRIDGE, "not restored byte for byte");
    }
    (kept, w.stderr_lines().join("\n"))
}

#[test]
fn at_exit_the_entry_stays_for_an_upgrade_and_goes_with_the_daemonset() {
    // The recorded server's kubeconfig lives in directories removed on drop.
    let holder = Dirs::new();
    let api = PodServer::start(&holder.conf.join("api"));
    let kubeconfig = api.kubeconfig().display().to_string();
    api.put_object(
        NODE_PATH,
        &json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"mesh": "on"}}}),
    );

    // An upgrade: the DaemonSet is there and selects the node.
    api.put_object(DS_PATH, &daemonset(json!({"mesh": "on"}), false));
    let (kept, log) = stop_with(&kubeconfig);
    assert!(kept, "removed during an upgrade: {log}");
    assert!(log.contains("exists and selects node node-1"), "{log}");

    // Relabelled out of the DaemonSet's nodeSelector: removed.
    api.put_object(DS_PATH, &daemonset(json!({"mesh": "off"}), false));
    let (kept, log) = stop_with(&kubeconfig);
    assert!(!kept, "kept on a node the DaemonSet left: {log}");
    assert!(log.contains("no longer selects node node-1"), "{log}");

    // Being deleted (foreground deletion): removed.
    api.put_object(DS_PATH, &daemonset(json!({"mesh": "on"}), true));
    let (kept, log) = stop_with(&kubeconfig);
    assert!(!kept, "kept while the DaemonSet is deleted: {log}");
    assert!(log.contains("is being deleted"), "{log}");

    // Gone: removed.
    api.remove_object(DS_PATH);
    let (kept, log) = stop_with(&kubeconfig);
    assert!(!kept, "kept after the DaemonSet went: {log}");
    assert!(log.contains("no longer exists"), "{log}");

    // The apiserver cannot say: kept (fail closed).
    let dead = holder.conf.join("unreachable.kubeconfig");
    std::fs::write(
        &dead,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
    )
    .expect("kubeconfig");
    let (kept, log) = stop_with(&dead.display().to_string());
    assert!(kept, "removed although the apiserver could not say: {log}");
    assert!(log.contains("failed") && log.contains("kept"), "{log}");
}
