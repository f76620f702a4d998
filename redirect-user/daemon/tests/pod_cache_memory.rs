//! What the pod watch's cache keeps of large pods (issue 46, finding 8): a node's pods carry
//! kilobytes the daemon never reads (managedFields, `last-applied-configuration`, the app's
//! env), and every pod of the node is cached, so the cache must keep only what the decision,
//! the policy and the reconcile read, and nothing of completed pods. The bounded test runs by
//! default; `pod_cache_memory_5000_pods_of_100_kb` (ignored: it feeds half a gigabyte of pods)
//! measures the process's resident memory as a node with 5,000 such pods would grow it:
//! `cargo test -p redirect-daemon --test pod_cache_memory -- --ignored --nocapture`.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;
use redirect_daemon::test_support::PodCache;
use redirect_testkit::reference::inject;
use serde_json::{json, Value};

/// The pod template of Istio's kube-inject `hello.yaml`, migrated to istio-cni's form (no
/// istio-init): what a meshed pod of the node looks like, before its bulk.
fn injected_template() -> Value {
    let docs = redirect_k8s::documents(&inject("hello.yaml")).expect("the manifest");
    let mut doc = docs
        .into_iter()
        .find(|d| d.kind() == "Deployment")
        .expect("a Deployment");
    redirect_k8s::migrate(&mut doc).expect("migrated");
    let pod = doc.pod().expect("decodes").expect("a pod template");
    serde_json::to_value(pod).expect("a pod is JSON")
}

/// A running meshed pod `i` of about `bulk + 8` KB: the template's spec and annotations, a
/// status as the kubelet writes it, and `bulk` KB in three fields the daemon never reads
/// (managedFields, a `last-applied-configuration` annotation, the app container's env).
fn bulky_pod(template: &Value, i: usize, bulk: usize, phase: &str) -> Pod {
    let mut v = template.clone();
    let third = bulk * 1024 / 3;
    let m = &mut v["metadata"];
    m["name"] = json!(format!("hello-{i}"));
    m["namespace"] = json!("shop");
    m["uid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
    m["resourceVersion"] = json!(format!("{}", 1000 + i));
    m["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!(format!("{i}{}", "x".repeat(third)));
    m["managedFields"] = json!([{
        "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:status": {"f:message": format!("{i}{}", "m".repeat(third))}},
    }]);
    let env: Vec<Value> = (0..third / 100)
        .map(|n| json!({"name": format!("APP_SETTING_{n}"), "value": "v".repeat(80)}))
        .collect();
    v["spec"]["nodeName"] = json!("node-a");
    v["spec"]["containers"][0]["env"] = json!(env);
    let id = |n: usize| format!("containerd://{i:032}{n:032}");
    let running = json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}});
    let status = |name: &str, n: usize| {
        json!({"name": name, "containerID": id(n), "image": "registry.example/app:1",
               "imageID": "registry.example/app@sha256:0000", "ready": true,
               "restartCount": 0, "started": true, "state": running})
    };
    let ip = format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256);
    v["status"] = json!({
        "phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "192.0.2.1",
        "qosClass": "Burstable", "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [status("hello", 1)],
        "initContainerStatuses": [status("istio-proxy", 2)],
    });
    serde_json::from_value(v).expect("a pod")
}

/// The JSON size of every pod the cache holds (what it retains, without allocator overhead).
fn cached_json_bytes(cache: &PodCache) -> usize {
    let (_, pods) = cache.synced().expect("listed");
    pods.iter()
        .map(|p| serde_json::to_vec(&**p).expect("JSON").len())
        .sum()
}

/// The process's resident set, in KiB (`VmRSS` of /proc/self/status).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Lists `running` running pods and `completed` completed ones of `bulk` KB each.
fn fill(cache: &PodCache, running: usize, completed: usize, bulk: usize) -> usize {
    let template = injected_template();
    let mut whole = 0;
    cache.apply(Event::Init);
    for i in 0..running + completed {
        let phase = if i < running { "Running" } else { "Succeeded" };
        let pod = bulky_pod(&template, i, bulk, phase);
        whole += serde_json::to_vec(&pod).expect("JSON").len();
        cache.apply(Event::InitApply(pod));
    }
    cache.apply(Event::InitDone);
    whole
}

#[test]
fn the_cache_keeps_under_4_kb_of_each_large_pod_and_nothing_of_completed_ones() {
    let cache = PodCache::default();
    let whole = fill(&cache, 200, 50, 100);
    let kept = cached_json_bytes(&cache);
    let per_pod = kept / 200;
    println!(
        "whole pods: {} bytes each; cached: {per_pod} bytes each",
        whole / 250
    );
    assert!(whole / 250 > 100_000, "the pods are large: {}", whole / 250);
    assert_eq!(cache.len(), 200, "completed pods are not cached");
    assert!(per_pod < 4096, "{per_pod} bytes cached per pod");
}

#[test]
#[ignore = "feeds 500 MB of pods; run with --ignored --nocapture for the measurement"]
fn pod_cache_memory_5000_pods_of_100_kb() {
    let cache = PodCache::default();
    let before = rss_kib();
    let whole = fill(&cache, 5000, 0, 100);
    let after = rss_kib();
    let kept = cached_json_bytes(&cache);
    let grown = after.saturating_sub(before);
    println!(
        "5000 pods of {} bytes (JSON) each: the cache holds {} pods, {} bytes of JSON each; \
            resident memory grew {grown} KiB ({} bytes a pod)",
        whole / 5000,
        cache.len(),
        kept / 5000,
        grown * 1024 / 5000,
    );
    assert!(kept / 5000 < 4096, "{} bytes cached per pod", kept / 5000);
    // The in-memory Pod (k8s-openapi's structs of mostly empty Options: a Container is 2 KB)
    // and its resolution weigh more than its JSON, and the allocator keeps some of what the
    // whole pods it decoded left; 5,000 pods still take at most a quarter of the daemon's
    // 512 MiB limit (whole, they took 1.2 GiB).
    assert!(grown < 128 * 1024, "resident memory grew {grown} KiB");
}
