//! A real cluster (kube-apiserver, controllers and kubelet 1.20.2 on containerd; see
//! `redirect_tests::cluster`) installed as deploy/README.md says: `kubectl apply` of rbac.yaml,
//! daemonset.yaml and untaint-controller.yaml. The DaemonSet controller makes the daemon's pod,
//! the scheduler places it on the tainted node, the kubelet runs it and its probes make it
//! Ready; the untaint controller, and only it, removes the readiness taint (issue 46, finding
//! 7: the daemon's account may not patch Nodes, and made no PATCH of one); then Istio-injected
//! pods (istio-cni's form: `istio-validation` before `istio-proxy`) of a Deployment of 3 are
//! started by the kubelet through containerd, which calls our plugin.
use redirect_tests::cluster::{
    checks::{assert_installed, inbound, node_patches, validation_passed},
    node::CLUSTER_DNS,
    ops::{name_of, world, DAEMON_USER, UNTAINT_USER},
    parts_or_skip,
    workloads::Injected,
    Cluster,
};

#[test]
fn kubectl_apply_installs_the_daemonset_and_istio_injected_pods_are_captured() {
    let Some(parts) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let cluster = Cluster::start(&parts).expect("the cluster");
    let reached = world(&cluster).expect("the world listener");
    assert!(
        cluster
            .taints()
            .iter()
            .any(|t| t == "redirect.dev/not-ready"),
        "the kubelet registers the node with the readiness taint"
    );
    cluster
        .install()
        .expect("kubectl apply of deploy/kubernetes");
    assert_installed(&cluster);
    // The daemon's account may not patch a Node (yes before: its ClusterRole granted it) and
    // made no PATCH of one; the taint was removed by the untaint controller's.
    for (user, may) in [(DAEMON_USER, false), (UNTAINT_USER, true)] {
        assert_eq!(
            cluster
                .kubectl
                .can_i("patch", "nodes", user)
                .expect("kubectl auth can-i"),
            may,
            "kubectl auth can-i patch nodes --as={user}"
        );
    }
    assert_eq!(node_patches(&cluster, DAEMON_USER), Vec::<String>::new());
    let by_controller = node_patches(&cluster, UNTAINT_USER);
    assert!(
        by_controller.iter().any(|p| p.starts_with("200 ")),
        "no PATCH of the Node by the untaint controller: {by_controller:?}"
    );

    let mut w = Injected::new("hello", 3, &parts.image, 3);
    w.dns_capture = true;
    let times = cluster.time_to_ready(&w).expect("the injected Deployment");
    eprintln!(
        "cluster: apply to Ready with our entry: {times:?} (median {:?})",
        times[times.len() / 2]
    );
    let pods = cluster
        .ready_pods("hello", 3)
        .expect("the injected Deployment");
    let listed = cluster.listed().expect("redirect list");
    for pod in &pods {
        validation_passed(&cluster, pod);
        let name = name_of(pod);
        cluster.assert_proxied(&reached, &name, 3);
        let seen = inbound(&cluster, pod);
        assert_eq!(
            seen, "127.0.0.6",
            "{name}: the application's peer behind the proxy"
        );
        let ip = pod["status"]["podIP"].as_str().expect("podIP");
        let entry = listed
            .iter()
            .find(|e| {
                e["addrs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == ip))
            })
            .unwrap_or_else(|| panic!("{name} ({ip}) not in redirect list: {listed:?}"));
        assert_eq!(entry["writer"], "cni", "{entry}");
        // DNS capture on: the cluster DNS address the daemon read from the kube-dns Service.
        assert_eq!(entry["policy"]["redirect_dns"], true, "{entry}");
        assert!(
            entry["policy"]["dns_servers"]
                .as_array()
                .is_some_and(|d| d.iter().any(|s| s == CLUSTER_DNS)),
            "{name}: DNS servers: {entry}"
        );
    }
    // What an operator sees (README's Kubernetes section shows a run's).
    for args in [
        &["get", "pods", "-A", "-o", "wide"][..],
        &["get", "nodes"][..],
    ] {
        eprintln!(
            "$ kubectl {}\n{}",
            args.join(" "),
            cluster.kubectl.run(args).unwrap_or_default()
        );
    }
    eprintln!(
        "$ redirect list\n{}",
        cluster.redirect(&["list"]).unwrap_or_default()
    );
    for user in [DAEMON_USER, UNTAINT_USER] {
        let forbidden = cluster.forbidden(user);
        assert!(
            forbidden.is_empty(),
            "requests of {user} refused by RBAC: {forbidden:?}"
        );
    }
}
