//! The Pod-to-CRI translation on the DaemonSet as written and on small pods.
use std::collections::BTreeMap;

use k8s_cri::v1::{MountPropagation, NamespaceMode};

use crate::pod::{self, NodeInfo, Override, Qos};

fn node() -> NodeInfo {
    NodeInfo {
        name: "node-a".into(),
        host_ip: "192.0.2.7".into(),
        cgroup_root: "/rk1".into(),
        cluster_dns: "10.96.0.10".into(),
        log_root: "/tmp/logs".into(),
        pods_root: "/tmp/pods".into(),
        api: None,
    }
}

fn daemonset() -> k8s_openapi::api::core::v1::Pod {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes/daemonset.yaml"
    );
    let text = std::fs::read_to_string(path).expect("daemonset.yaml");
    pod::from_yaml(&text, "redirect-abcde", "uid-1").expect("the template")
}

#[test]
fn expansion_replaces_defined_variables_only_and_unescapes_dollars() {
    let vars = BTreeMap::from([("NODE_IP".to_owned(), "192.0.2.7".to_owned())]);
    assert_eq!(pod::expand("[$(NODE_IP)]:9967", &vars), "[192.0.2.7]:9967");
    assert_eq!(
        pod::expand("$(UNSET) $$(NODE_IP) $", &vars),
        "$(UNSET) $(NODE_IP) $"
    );
}

#[test]
fn quantities_are_read_as_the_apiserver_writes_them() {
    assert_eq!(crate::quantity::memory_bytes("512Mi").ok(), Some(512 << 20));
    assert_eq!(
        crate::quantity::memory_bytes("1G").ok(),
        Some(1_000_000_000)
    );
    assert_eq!(crate::quantity::millicores("50m").ok(), Some(50));
    assert_eq!(crate::quantity::millicores("1").ok(), Some(1000));
    assert!(crate::quantity::memory_bytes("lots").is_err());
}

#[test]
fn the_daemonset_pod_runs_on_the_host_network_with_its_capabilities_and_mounts() {
    let pod = daemonset();
    assert_eq!(pod::qos(&pod).ok(), Some(Qos::Burstable));
    let sandbox = pod::sandbox_config(&pod, &node()).expect("sandbox");
    let linux = sandbox.linux.clone().expect("linux");
    assert_eq!(linux.cgroup_parent, "/rk1/kubepods/burstable/poduid-1");
    let ns = linux
        .security_context
        .and_then(|s| s.namespace_options)
        .expect("namespaces");
    assert_eq!(ns.network, i32::from(NamespaceMode::Node));
    assert_eq!(ns.pid, i32::from(NamespaceMode::Node));
    // Host network: the node's resolv.conf, not the cluster DNS.
    assert!(sandbox.dns_config.is_none());
    assert_eq!(
        sandbox.metadata.expect("metadata").namespace,
        "istio-system"
    );

    let spec = pod.spec.clone().expect("spec");
    let daemon = &spec.containers[0];
    let config =
        pod::container_config(&pod, daemon, &node(), "", &Override::default()).expect("config");
    assert_eq!(
        config.args[..3],
        ["daemon", "--metrics", "[192.0.2.7]:9967"]
    );
    assert!(config
        .envs
        .iter()
        .any(|e| e.key == "NODE_NAME" && e.value == "node-a"));
    let sc = config
        .linux
        .clone()
        .and_then(|l| l.security_context)
        .expect("security");
    assert!(
        !sc.privileged,
        "the daemon runs with capabilities, not privileged"
    );
    let caps = sc.capabilities.clone().expect("capabilities");
    assert_eq!(caps.drop_capabilities, ["ALL"]);
    assert_eq!(
        caps.add_capabilities,
        ["BPF", "PERFMON", "NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"]
    );
    let bpffs = config
        .mounts
        .iter()
        .find(|m| m.container_path == "/sys/fs/bpf")
        .expect("bpffs");
    assert_eq!(bpffs.host_path, "/sys/fs/bpf");
    assert_eq!(
        bpffs.propagation,
        i32::from(MountPropagation::PropagationHostToContainer)
    );
    let netns = config
        .mounts
        .iter()
        .find(|m| m.container_path == "/run/netns")
        .expect("netns");
    assert_eq!(
        netns.propagation,
        i32::from(MountPropagation::PropagationHostToContainer)
    );
    let memory = config
        .linux
        .and_then(|l| l.resources)
        .expect("resources")
        .memory_limit_in_bytes;
    assert_eq!(memory, 512 << 20);

    let install = &spec.containers[1];
    let config =
        pod::container_config(&pod, install, &node(), "", &Override::default()).expect("config");
    let sc = config
        .linux
        .and_then(|l| l.security_context)
        .expect("security");
    assert!(!sc.privileged && sc.readonly_rootfs && sc.no_new_privs);
    assert_eq!(sc.run_as_user.map(|u| u.value), Some(0));
    assert_eq!(sc.capabilities.expect("caps").drop_capabilities, ["ALL"]);
}

#[test]
fn a_pod_on_the_pod_network_gets_the_cluster_dns_and_its_annotations() {
    let text = r#"{"apiVersion": "v1", "kind": "Pod",
        "metadata": {"namespace": "shop", "annotations": {"sidecar.istio.io/status": "{}"}},
        "spec": {"containers": [{"name": "app", "image": "x"}]}}"#;
    let pod = pod::from_yaml(text, "hello", "u-2").expect("pod");
    assert_eq!(pod::qos(&pod).ok(), Some(Qos::BestEffort));
    let sandbox = pod::sandbox_config(&pod, &node()).expect("sandbox");
    let dns = sandbox.dns_config.expect("cluster DNS");
    assert_eq!(dns.servers, ["10.96.0.10"]);
    assert_eq!(dns.searches[0], "shop.svc.cluster.local");
    assert!(sandbox.annotations.contains_key("sidecar.istio.io/status"));
    assert_eq!(
        sandbox.linux.expect("linux").cgroup_parent,
        "/rk1/kubepods/besteffort/podu-2"
    );
    assert!(pod::from_yaml(r#"{"kind": "Service"}"#, "a", "b").is_err());
}

#[test]
fn a_node_with_an_apiserver_gives_in_cluster_credentials_unless_the_pod_opts_out() {
    let mut pod = daemonset();
    let mut node = node();
    node.api = Some(crate::service_account::ApiAccess {
        host: "127.0.0.1".into(),
        port: 6443,
        ca_pem: String::new(),
        token: Default::default(),
    });
    let daemon = pod.spec.clone().expect("spec").containers[0].clone();
    let config = pod::container_config(&pod, &daemon, &node, "", &Override::default()).unwrap();
    let env = |config: &k8s_cri::v1::ContainerConfig, key: &str| {
        config
            .envs
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.clone())
    };
    assert_eq!(
        env(&config, "KUBERNETES_SERVICE_HOST").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        env(&config, "KUBERNETES_SERVICE_PORT").as_deref(),
        Some("6443")
    );
    let sa = config
        .mounts
        .iter()
        .find(|m| m.container_path == crate::service_account::MOUNT_PATH)
        .expect("the projected token");
    assert!(sa.readonly);
    assert_eq!(sa.host_path, "/tmp/pods/uid-1/volumes/kube-api-access");

    pod.spec
        .as_mut()
        .expect("spec")
        .automount_service_account_token = Some(false);
    let config = pod::container_config(&pod, &daemon, &node, "", &Override::default()).unwrap();
    assert!(!config
        .mounts
        .iter()
        .any(|m| m.container_path == crate::service_account::MOUNT_PATH));
}
