//! The untaint controller's manifest (deploy/kubernetes/untaint-controller.yaml) says what we
//! mean, and it alone may change a Node (issue 46, finding 7): of every Role and ClusterRole of
//! deploy/kubernetes, only the ClusterRole `redirect-untaint` grants nodes patch (or any other
//! write of nodes, or a wildcard), and it is bound only to the ServiceAccount
//! `istio-system/redirect-untaint`, which the one-replica Deployment runs as; that Deployment
//! tolerates the taint it removes, is never meshed, runs as a non-root user without
//! capabilities on a read-only root, and its args are accepted by `redirect ... --help` and name
//! the DaemonSet's namespace and pod labels and the readiness taint.
use serde_json::{json, Value};

use super::deploy::{assert_cli_accepts, manifests, words};

/// Whether `rule` lets its holder change Nodes.
fn writes_nodes(rule: &Value) -> bool {
    let has = |field: &str, wanted: &[&str]| {
        rule[field]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == "*" || wanted.iter().any(|w| v == w)))
    };
    has("apiGroups", &[""])
        && has("resources", &["nodes"])
        && has(
            "verbs",
            &["patch", "update", "create", "delete", "deletecollection"],
        )
}

#[test]
fn only_the_untaint_controller_may_patch_nodes() {
    let m = manifests();
    let writers: Vec<String> = ["ClusterRole", "Role"]
        .iter()
        .flat_map(|kind| m.get(*kind).into_iter().flatten().map(move |r| (kind, r)))
        .filter(|(_, r)| {
            r["rules"]
                .as_array()
                .is_some_and(|rules| rules.iter().any(writes_nodes))
        })
        .map(|(kind, r)| format!("{kind} {}", r["metadata"]["name"].as_str().unwrap_or("?")))
        .collect();
    assert_eq!(writers, ["ClusterRole redirect-untaint"]);
    let role = m["ClusterRole"]
        .iter()
        .find(|r| r["metadata"]["name"] == "redirect-untaint")
        .expect("the controller's ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}])
    );
    let controller_sa = json!([{"kind": "ServiceAccount", "name": "redirect-untaint", "namespace": "istio-system"}]);
    let bindings: Vec<&Value> = ["ClusterRoleBinding", "RoleBinding"]
        .iter()
        .flat_map(|kind| m.get(*kind).into_iter().flatten())
        .filter(|b| b["roleRef"]["name"] == "redirect-untaint")
        .collect();
    assert_eq!(
        bindings.len(),
        2,
        "a binding each for the ClusterRole and the Role: {bindings:?}"
    );
    for b in &bindings {
        assert_eq!(b["subjects"], controller_sa, "{b}");
    }
    let cluster_binding = bindings
        .iter()
        .find(|b| b["kind"] == "ClusterRoleBinding")
        .expect("the ClusterRoleBinding");
    assert_eq!(
        cluster_binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "redirect-untaint"})
    );
    let pods_role = m["Role"]
        .iter()
        .find(|r| r["metadata"]["name"] == "redirect-untaint")
        .expect("the controller's Role");
    assert_eq!(pods_role["metadata"]["namespace"], "istio-system");
    assert_eq!(
        pods_role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
    );
    assert!(
        m["ServiceAccount"]
            .iter()
            .any(|sa| sa["metadata"]
                == json!({"name": "redirect-untaint", "namespace": "istio-system"})),
        "no ServiceAccount istio-system/redirect-untaint"
    );
}

#[test]
fn the_untaint_controller_runs_once_unmeshed_unprivileged_and_tolerates_its_taint() {
    let m = manifests();
    let [deployment] = m["Deployment"].as_slice() else {
        panic!("one Deployment: {:?}", m["Deployment"]);
    };
    let [ds] = m["DaemonSet"].as_slice() else {
        panic!("one DaemonSet");
    };
    assert_eq!(deployment["metadata"]["namespace"], "istio-system");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let template = &deployment["spec"]["template"];
    assert_eq!(
        template["metadata"]["annotations"]["sidecar.istio.io/inject"],
        "false"
    );
    // Not one of the pods it watches.
    assert_ne!(
        template["metadata"]["labels"],
        ds["spec"]["template"]["metadata"]["labels"]
    );
    let spec = &template["spec"];
    assert_eq!(spec["serviceAccountName"], "redirect-untaint");
    assert!(
        spec["hostNetwork"].is_null() && spec["hostPID"].is_null(),
        "{spec}"
    );
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "redirect.dev/not-ready", "operator": "Exists", "effect": "NoSchedule"}])
    );
    let [c] = spec["containers"]
        .as_array()
        .expect("containers")
        .as_slice()
    else {
        panic!("one container: {spec}");
    };
    let ds_image = &ds["spec"]["template"]["spec"]["containers"][0]["image"];
    assert_eq!(&c["image"], ds_image, "the DaemonSet's image");
    let args = words(&c["args"]);
    assert_cli_accepts(&args);
    let flag = |name: &str| {
        let at = args
            .iter()
            .position(|a| a == name)
            .unwrap_or_else(|| panic!("{name} missing: {args:?}"));
        args[at + 1].clone()
    };
    assert_eq!(args[0], "untaint-controller");
    assert_eq!(flag("--taint"), "redirect.dev/not-ready:NoSchedule");
    assert_eq!(
        flag("--namespace"),
        ds["metadata"]["namespace"].as_str().expect("ns")
    );
    let labels = ds["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .expect("the DaemonSet's pod labels");
    let selector: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().expect("a label value")))
        .collect();
    assert_eq!(flag("--selector"), selector.join(","));
    assert_eq!(
        c["securityContext"],
        json!({"runAsNonRoot": true, "runAsUser": 65534, "runAsGroup": 65534,
               "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
               "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    assert!(
        c["resources"]["limits"]["memory"].is_string()
            && c["resources"]["limits"]["cpu"].is_string()
            && c["resources"]["requests"]["memory"].is_string(),
        "no requests and limits: {c}"
    );
}
