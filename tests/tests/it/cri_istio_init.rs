//! istio-init's container as Istio's injector writes it without istio-cni, its image replaced by
//! this build's (`redirect istio-iptables` with istio-init's own arguments), in a pod containerd
//! starts on a node whose datapath the DaemonSet's daemon owns (`redirect_tests::mesh`). It runs
//! inside the pod's network namespace and names it only as its own `/proc/self/ns/net`: it
//! hands the namespace's descriptor to the daemon, which finds the name containerd gave it
//! (`/run/netns/cni-...`) and enrolls it. The CNI entry skips the pod (istio-init present, as
//! istio-cni's plugin decides). What the operator adds to istio-init is what the daemon's socket
//! and the pinned datapath need: the host's bpffs and `/run/redirect`, and CAP_BPF.
use std::{collections::HashMap, time::Duration};

use redirect_kubelet::Override;
use redirect_testkit::{eventually, unique_name};
use redirect_tests::{
    apiserver::recorded_pod_with_istio_init,
    mesh::{parts_or_skip, MeshNode, NODE},
};
use serde_json::json;

/// Pod `name` with Istio's istio-init, given the daemon's socket and the bpffs.
fn pod_with_istio_init(
    mesh: &MeshNode,
    name: &str,
) -> (k8s_openapi::api::core::v1::Pod, HashMap<String, Override>) {
    let mut object =
        recorded_pod_with_istio_init("hello.yaml", "shop", name, &format!("uid-{name}"), NODE);
    let spec = &mut object["spec"];
    let volumes = spec["volumes"].as_array_mut().expect("volumes");
    volumes.push(json!({"name": "bpffs", "hostPath": {"path": "/sys/fs/bpf"}}));
    volumes.push(json!({"name": "redirect", "hostPath": {"path": "/run/redirect"}}));
    let init = spec["initContainers"]
        .as_array_mut()
        .expect("init containers")
        .iter_mut()
        .find(|c| c["name"] == "istio-init")
        .expect("istio-init");
    init["volumeMounts"] = json!([
        {"name": "bpffs", "mountPath": "/sys/fs/bpf"},
        {"name": "redirect", "mountPath": "/run/redirect"},
    ]);
    // Istio's NET_ADMIN and NET_RAW, and CAP_BPF for the pinned datapath's record.
    init["securityContext"]["capabilities"]["add"]
        .as_array_mut()
        .expect("capabilities")
        .push("BPF".into());
    mesh.api.put(&object);
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(object).expect("a Pod");
    let mut overrides = mesh.overrides(&pod, "0.1");
    // istio-init's own arguments (`istio-iptables -p 15001 ...`), this image's binary.
    overrides.insert(
        "istio-init".into(),
        Override {
            image: Some(mesh.image.clone()),
            command: Some(vec!["redirect".into()]),
            ..Override::default()
        },
    );
    (pod, overrides)
}

#[test]
fn istio_init_run_from_the_image_inside_the_pod_hands_its_namespace_to_the_daemon() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let name = unique_name("init-");
    let (pod, overrides) = pod_with_istio_init(&mesh, &name);
    let running = mesh
        .kubelet()
        .run(&pod, &overrides)
        .unwrap_or_else(|e| panic!("the pod with istio-init: {e}"));
    let netns = running.netns.clone().expect("a pod network namespace");
    let init_log = mesh.kubelet().logs(&running, "istio-init");
    assert!(
        init_log.contains("through the daemon"),
        "istio-init went around the daemon: {init_log}"
    );

    // One enrollment, by istio-iptables (no pod: the CNI entry skipped it), at containerd's
    // name for the namespace as the daemon sees it.
    let list = mesh.listed();
    assert_eq!(list.len(), 1, "{list:?}");
    let seen_at = format!(
        "/run/netns/{}",
        netns.file_name().expect("a name").to_string_lossy()
    );
    assert_eq!(list[0]["netns"], seen_at.as_str(), "{list:?}");
    assert!(list[0]["pod"].is_null(), "{list:?}");
    let source = list[0]["source"].as_str().unwrap_or_default();
    assert!(source.starts_with("istio-iptables -p 15001"), "{list:?}");

    eventually(
        "five connections through the proxy",
        Duration::from_secs(60),
        || match mesh.proxied(&running).len() {
            n if n >= 5 => Ok(()),
            n => Err(n),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(mesh.assert_all_proxied(&running) >= 5);

    // The pod removed: its namespace's name goes, and the enrollment with it.
    mesh.kubelet().remove(&running).expect("remove the pod");
    eventually(
        "the enrollment to go with the pod",
        Duration::from_secs(30),
        || match mesh.listed() {
            l if l.is_empty() => Ok(()),
            l => Err(l),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}
