//! Every manifest of deploy/kubernetes parses, and says what we mean: the daemon's ClusterRole
//! grants pods get/list/watch and nodes get and nothing more, Roles get on the kube-dns Service
//! and on the DaemonSet only, all to the ServiceAccount the DaemonSet runs as; every
//! container's args and every exec probe name a `redirect` subcommand and flags that exist
//! (`redirect ARGS --help` succeeds); each volume mount names a volume; the install-cni
//! container has the CNI directories from the host and a readiness probe that checks them. The
//! untaint controller's manifest: `deploy_untaint`.
use std::{collections::BTreeMap, path::Path, process::Command};

use redirect_tests::bin_path;
use serde::Deserialize as _;
use serde_json::{json, Value};

/// Every document of every deploy/kubernetes/*.yaml, by kind.
pub(crate) fn manifests() -> BTreeMap<String, Vec<Value>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/kubernetes");
    let mut by_kind: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("deploy/kubernetes") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        for doc in serde_norway::Deserializer::from_str(&text) {
            let v = Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            let kind = v["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no kind", path.display()));
            by_kind.entry(kind.to_owned()).or_default().push(v);
        }
    }
    by_kind
}

pub(crate) fn one<'a>(m: &'a BTreeMap<String, Vec<Value>>, kind: &str) -> &'a Value {
    match m.get(kind).map(Vec::as_slice) {
        Some([v]) => v,
        other => panic!("expected one {kind}, found {other:?}"),
    }
}

/// The objects of `all` that are not the untaint controller's (named `redirect-untaint`).
fn daemons(all: &BTreeMap<String, Vec<Value>>) -> BTreeMap<String, Vec<Value>> {
    all.iter()
        .map(|(kind, docs)| {
            let theirs = docs
                .iter()
                .filter(|d| d["metadata"]["name"] != "redirect-untaint")
                .cloned()
                .collect();
            (kind.clone(), theirs)
        })
        .collect()
}

pub(crate) fn words(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|w| {
                    w.as_str()
                        .expect("a string")
                        .replace("$(NODE_IP)", "10.0.0.5")
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn assert_cli_accepts(words: &[String]) {
    let out = Command::new(bin_path("redirect"))
        .args(words)
        .arg("--help")
        .output()
        .expect("redirect --help");
    assert!(
        out.status.success(),
        "redirect {words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn manifests_parse_grant_only_pod_reads_and_name_real_commands() {
    let all = manifests();
    // The daemon's own: rbac.yaml's objects and the DaemonSet (the untaint controller's are
    // deploy_untaint's).
    let m = daemons(&all);
    let role = one(&m, "ClusterRole");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}])
    );
    let sa = one(&m, "ServiceAccount");
    // The one Service the daemon reads (the cluster DNS address), in its namespace only, and
    // the one DaemonSet install-cni reads when it stops.
    let roles: Vec<&Value> = m.get("Role").into_iter().flatten().collect();
    let ds_role = roles
        .iter()
        .find(|r| r["metadata"]["namespace"] == "istio-system")
        .expect("the DaemonSet's Role");
    assert_eq!(
        ds_role["rules"],
        json!([{"apiGroups": ["apps"], "resources": ["daemonsets"], "resourceNames": ["redirect"], "verbs": ["get"]}])
    );
    let dns = *roles
        .iter()
        .find(|r| r["metadata"]["namespace"] == "kube-system")
        .expect("the cluster DNS Role");
    assert_eq!(dns["metadata"]["namespace"], "kube-system");
    assert_eq!(
        dns["rules"],
        json!([{"apiGroups": [""], "resources": ["services"], "resourceNames": ["kube-dns"], "verbs": ["get"]}])
    );
    let bindings: Vec<&Value> = m.get("RoleBinding").into_iter().flatten().collect();
    assert_eq!(bindings.len(), 2, "a RoleBinding per Role");
    for b in &bindings {
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
        );
    }
    let dns_binding = *bindings
        .iter()
        .find(|b| b["metadata"]["namespace"] == "kube-system")
        .expect("the cluster DNS binding");
    assert_eq!(dns_binding["metadata"]["namespace"], "kube-system");
    assert_eq!(
        dns_binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": dns["metadata"]["name"]})
    );
    assert_eq!(
        dns_binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
    );
    let binding = one(&m, "ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}])
    );

    let ds = one(&m, "DaemonSet");
    assert_eq!(ds["metadata"]["namespace"], sa["metadata"]["namespace"]);
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(spec["hostPID"], true);
    let volumes: BTreeMap<String, Value> = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| (v["name"].as_str().expect("name").to_owned(), v.clone()))
        .collect();
    let containers = spec["containers"].as_array().expect("containers");
    let mut names = Vec::new();
    for c in containers {
        let name = c["name"].as_str().expect("container name");
        names.push(name.to_owned());
        assert!(
            c["resources"]["limits"]["memory"].is_string()
                && c["resources"]["limits"]["cpu"].is_string(),
            "{name}: no limits"
        );
        assert_cli_accepts(&words(&c["args"]));
        let probe = words(&c["readinessProbe"]["exec"]["command"]);
        assert_eq!(
            probe.first().map(String::as_str),
            Some("redirect"),
            "{name}: {probe:?}"
        );
        assert_cli_accepts(&probe[1..]);
        if !c["livenessProbe"].is_null() {
            let live = words(&c["livenessProbe"]["exec"]["command"]);
            assert_eq!(live.first().map(String::as_str), Some("redirect"), "{name}");
            assert_cli_accepts(&live[1..]);
        }
        for mount in c["volumeMounts"].as_array().expect("mounts") {
            assert!(
                volumes.contains_key(mount["name"].as_str().expect("name")),
                "{name}: {mount}"
            );
        }
    }
    assert_eq!(names, ["redirect", "install-cni"]);
    // The daemon is ready when it answers (not when its files can be read), alive while it
    // answers at all; each exec probe has a timeout above the wait it asks for.
    let daemon = &containers[0];
    assert_eq!(
        words(&daemon["readinessProbe"]["exec"]["command"]),
        ["redirect", "ping"]
    );
    assert_eq!(
        words(&daemon["livenessProbe"]["exec"]["command"])[..2],
        ["redirect", "ping"]
    );
    assert!(daemon["livenessProbe"]["timeoutSeconds"].as_u64() > Some(10));
    assert!(daemon["readinessProbe"]["timeoutSeconds"].as_u64() > Some(3));
    let install = &containers[1];
    let args = words(&install["args"]);
    assert_eq!(args[..2], ["install-cni", "--watch"]);
    let probe = words(&install["readinessProbe"]["exec"]["command"]);
    assert_eq!(probe[1..3], ["install-cni", "--check"]);
    // The probe checks what the watcher installs: the same directories and entry (the
    // watcher's exit decision, --daemonset, is the watcher's alone).
    let at = args
        .iter()
        .position(|a| a == "--daemonset")
        .expect("--daemonset");
    assert_eq!(
        args[at + 1],
        format!(
            "{}/{}",
            ds["metadata"]["namespace"].as_str().expect("ns"),
            ds["metadata"]["name"].as_str().expect("name")
        )
    );
    let installs: Vec<&String> = args[2..at].iter().chain(&args[at + 2..]).collect();
    assert_eq!(
        probe[3..].iter().collect::<Vec<_>>(),
        installs,
        "the probe and the watcher disagree"
    );
    for (flag, host) in [
        ("--cni-bin-dir", "/opt/cni/bin"),
        ("--cni-conf-dir", "/etc/cni/net.d"),
    ] {
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{flag} missing"));
        let inside = &args[at + 1];
        let mount = install["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["mountPath"] == inside.as_str())
            .unwrap_or_else(|| panic!("{inside} not mounted"));
        assert_eq!(
            volumes[mount["name"].as_str().expect("name")]["hostPath"]["path"],
            host
        );
    }
    let env = install["env"].as_array().expect("env");
    assert!(
        env.contains(&json!({"name": "REDIRECT_UNINSTALL_ON_EXIT", "value": "false"})),
        "{env:?}"
    );
}
