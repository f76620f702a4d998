//! The reconcile keeps the plugin's exclusions (issue 31, finding 8): a meshed pod in a
//! namespace our conflist entry excludes (`exclude_namespaces`; `daemon_pods` likewise) was
//! skipped by the plugin at ADD and must not be captured seconds later by the reconcile. The
//! daemon reads our entry from the runtime's conflist (`--cni-conf-dir`): the running pod stays
//! unenrolled while its namespace is excluded, and is enrolled in place once it is not.
use std::time::Duration;

use redirect_testkit::privileged;
use redirect_tests::cni::{CniHost, GATEWAY};
use serde_json::{json, Value};

use crate::reconcile::{lands, listed, wait_for, Meshed};

/// The node's conflist: Debian's bridge, then our entry excluding `namespaces`.
fn conflist(namespaces: &[&str]) -> String {
    json!({"cniVersion": "1.0.0", "name": "k8s", "plugins": [
        {"type": "bridge", "bridge": "cni0"},
        {"type": "redirect-cni", "daemon_socket": "/run/redirect/daemon/daemon.sock",
         "exclude_namespaces": namespaces, "log_level": "info"}
    ]})
    .to_string()
}

#[test]
fn a_pod_the_plugin_excludes_is_not_enrolled_in_place() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let m = Meshed::new(&host);
    let (node, pod) = (&m.node, &m.pod);
    let net_d = node.dir.join("net.d");
    std::fs::create_dir_all(&net_d).expect("net.d");
    let list = net_d.join("10-k8s.conflist");
    std::fs::write(&list, conflist(&["kube-system", "shop"])).expect("conflist");
    m.report(true);
    let conf_dir = net_d.display().to_string();
    let mut daemon = m.daemon(&["--cni-conf-dir", &conf_dir]);
    let line = daemon
        .wait_stderr_line("the exclusion said", Duration::from_secs(30), |l| {
            l.contains("a running meshed pod the plugin excludes")
        })
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert!(line.contains("exclude_namespaces"), "{line}");
    assert_eq!(
        listed(node),
        Vec::<Value>::new(),
        "an excluded pod enrolled"
    );
    let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, &m.cgroups.app, 1000), direct);

    // Its namespace no longer excluded: enrolled in place, captured.
    std::fs::write(&list, conflist(&["kube-system"])).expect("conflist");
    wait_for("the pod enrolled once not excluded", node, |l| l.len() == 1);
    assert_eq!(
        lands(&pod.netns, &m.cgroups.app, 1000),
        format!("at=proxy/[::]:15001 orig={GATEWAY}:80")
    );
}
