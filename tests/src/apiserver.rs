//! Recorded Pod objects for the recorded-object apiserver ([`PodServer`], in the testkit):
//! Istio's vendored kube-inject manifests migrated as redirect's own manifest code migrates them.
use redirect_testkit::reference;
use serde_json::Value;

pub use redirect_testkit::apiserver::PodServer;

/// A pod as the apiserver returns it, built from the vendored kube-inject manifest `manifest`
/// (one of [`reference::INJECT_MANIFESTS`]) migrated to what Istio's injector emits with
/// istio-cni enabled (native sidecar, no istio-init), without its istio-validation container,
/// named and scheduled on `node`.
pub fn recorded_pod(manifest: &str, namespace: &str, name: &str, uid: &str, node: &str) -> Value {
    pod_of(manifest, true, [namespace, name, uid, node])
}

/// [`recorded_pod`] as the manifest has it, not migrated: Istio's injector without istio-cni
/// (its `istio-init` container runs istio-iptables in the pod).
pub fn recorded_pod_with_istio_init(
    manifest: &str,
    namespace: &str,
    name: &str,
    uid: &str,
    node: &str,
) -> Value {
    pod_of(manifest, false, [namespace, name, uid, node])
}

fn pod_of(manifest: &str, migrate: bool, [namespace, name, uid, node]: [&str; 4]) -> Value {
    let text = reference::inject(manifest);
    let mut docs = redirect_k8s::documents(&text).expect("the manifest parses");
    let doc = docs
        .iter_mut()
        .find(|d| d.kind() == "Deployment" || d.kind() == "Pod")
        .expect("a workload in the manifest");
    if migrate {
        redirect_k8s::migrate(doc).expect("migrate");
    }
    let pod = doc.pod().expect("decode").expect("a pod");
    let mut v = serde_json::to_value(pod).expect("a Pod serialises");
    v["apiVersion"] = "v1".into();
    v["kind"] = "Pod".into();
    v["metadata"]["name"] = name.into();
    v["metadata"]["namespace"] = namespace.into();
    v["metadata"]["uid"] = uid.into();
    v["spec"]["nodeName"] = node.into();
    // The migration writes istio-validation in istio-init's place, as the injector does; the
    // recorded pods leave it out, since the kubelet-lite's pods run no proxyv2 image
    // (`cri_validation` adds it back, run from the image under test).
    if let Some(inits) = v["spec"]["initContainers"].as_array_mut() {
        inits.retain(|c| c["name"] != "istio-validation");
    }
    v
}
