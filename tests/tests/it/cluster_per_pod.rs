//! The per-pod attach scope (`redirect daemon --attach-scope per-pod`, issue 48) on a real
//! cluster (`redirect_tests::cluster`): kubelet 1.20 makes each pod's cgroup before its
//! sandbox, so the CNI ADD finds it by the pod's uid and links the programs there before the
//! pod's containers start; the Istio-injected pods are captured with nothing linked at the
//! node; `kubectl delete pod` (its DEL) unlinks its cgroup while its replacement is linked.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use redirect_testkit::eventually;
use redirect_tests::cluster::{ops, ops::name_of, parts_or_skip, workloads::Injected, Cluster};
use serde_json::{json, Value};

fn status(cluster: &Cluster) -> Value {
    let text = cluster
        .redirect(&["status", "--json"])
        .unwrap_or_else(|e| panic!("redirect status: {e:#}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn linked(cluster: &Cluster) -> Vec<u64> {
    let mut ids: Vec<u64> = status(cluster)["node"]["pod_cgroups"]
        .as_array()
        .expect("pod_cgroups")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    ids.sort_unstable();
    ids
}

/// The directory named `pod<uid>` below `dir` (the kubelet's cgroupfs names), at most 4 deep.
fn pod_dir(dir: &Path, uid: &str, depth: usize) -> Option<PathBuf> {
    let want = format!("pod{uid}");
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if entry.file_name().to_str() == Some(want.as_str()) {
            return Some(path);
        }
        if depth > 0 {
            if let Some(found) = pod_dir(&path, uid, depth - 1) {
                return Some(found);
            }
        }
    }
    None
}

/// The cgroup id of `pod`'s cgroup on the node.
fn cgroup_id(cluster: &Cluster, pod: &Value) -> u64 {
    let uid = pod["metadata"]["uid"].as_str().expect("a uid");
    let dir = pod_dir(cluster.node.cgroup.path(), uid, 4)
        .unwrap_or_else(|| panic!("no cgroup directory for pod uid {uid}"));
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dir).expect("its cgroup"))
}

#[test]
fn per_pod_scope_on_a_real_kubelet_links_each_pod_at_its_cgroup() {
    let Some(parts) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let cluster = Cluster::start(&parts).expect("the cluster");
    let reached = ops::world(&cluster).expect("the world listener");
    cluster
        .install_with(&parts.image, &["--attach-scope", "per-pod"])
        .expect("kubectl apply of deploy/kubernetes with --attach-scope per-pod");
    let s = status(&cluster);
    assert_eq!(s["node"]["scope"], "per-pod", "{s}");
    assert_eq!(
        s["node"]["links"],
        json!([]),
        "nothing linked at the node: {s}"
    );

    let w = Injected::new("perpod", 2, &parts.image, 3);
    let pods = cluster.deploy(&w).expect("the injected Deployment");
    for pod in &pods {
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }
    let mut want: Vec<u64> = pods.iter().map(|p| cgroup_id(&cluster, p)).collect();
    want.sort_unstable();
    assert_eq!(
        linked(&cluster),
        want,
        "each pod's own cgroup, and only those"
    );

    // kubectl delete pod: its DEL unlinks its cgroup; the replacement's ADD links its own.
    let (victim, victim_id) = (name_of(&pods[0]), cgroup_id(&cluster, &pods[0]));
    cluster
        .kubectl
        .run(&["delete", "pod", "-n", "shop", &victim, "--wait=true"])
        .unwrap_or_else(|e| panic!("{e:#}"));
    let pods = cluster
        .ready_pods("perpod", 2)
        .expect("the replacement pod");
    eventually(
        "the deleted pod's cgroup unlinked, the replacement's linked",
        Duration::from_secs(60),
        || {
            let now = linked(&cluster);
            let mut want: Vec<u64> = pods.iter().map(|p| cgroup_id(&cluster, p)).collect();
            want.sort_unstable();
            (now == want && !now.contains(&victim_id))
                .then_some(())
                .ok_or_else(|| format!("linked {now:?}, pods {want:?}, deleted {victim_id}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for pod in pods.iter().filter(|p| name_of(p) != victim) {
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }
}
