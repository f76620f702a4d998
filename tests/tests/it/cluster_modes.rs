//! Istio-injected pods the kubelet starts on a real cluster (`redirect_tests::cluster`) in the
//! modes that need more than the default capture: strict proxy binding (the pod's
//! `redirect.dev/proxy-binding: strict`, then the daemon's `--strict-proxy-binding`), where
//! Istio's istio-validation container (uid 1337, its own container, before istio-proxy) must
//! still pass while an application container running as uid 1337 stays captured; and TPROXY
//! mode (`sidecar.istio.io/interceptionMode: TPROXY`) enrolled by the DaemonSet's
//! non-privileged daemon, where the application sees the client's own address.
use redirect_tests::cluster::{
    checks::{inbound, validation_passed},
    installed,
    node::GATEWAY,
    ops::name_of,
    workloads::Injected,
    Cluster,
};

/// Pods of `w` pass validation, and both their app and their imposter (uid 1337 outside the
/// proxy container) go through the proxy.
fn strict_pods_are_validated_and_captured(
    cluster: &Cluster,
    reached: &redirect_tests::cluster::ops::Reached,
    w: &Injected,
) {
    let pods = cluster.deploy(w).expect("the strict Deployment");
    for pod in &pods {
        validation_passed(cluster, pod);
        // 3 connections of the app and 3 of the imposter: all through the proxy.
        cluster.assert_proxied(reached, &name_of(pod), 6);
    }
}

#[test]
fn strict_binding_lets_istio_validation_pass_and_captures_uid_1337_outside_the_proxy() {
    let Some((parts, cluster, reached)) = installed(redirect_testkit::test_path!()) else {
        return;
    };

    // The pod's annotation.
    let mut w = Injected::new("strict", 1, &parts.image, 3);
    w.imposter = true;
    w.annotations = vec![("redirect.dev/proxy-binding".into(), "strict".into())];
    strict_pods_are_validated_and_captured(&cluster, &reached, &w);

    // The daemon's flag, for every pod (a DaemonSet rollout to the flag).
    cluster
        .install_with(&parts.image, &["--strict-proxy-binding"])
        .expect("the DaemonSet with --strict-proxy-binding");
    let mut w = Injected::new("flagged", 1, &parts.image, 3);
    w.imposter = true;
    strict_pods_are_validated_and_captured(&cluster, &reached, &w);
}

#[test]
fn a_tproxy_pod_started_by_the_kubelet_shows_the_application_the_clients_address() {
    let Some((parts, cluster, reached)) = installed(redirect_testkit::test_path!()) else {
        return;
    };
    let mut w = Injected::new("tproxy", 1, &parts.image, 3);
    w.tproxy = true;
    let pods = cluster.deploy(&w).expect("the TPROXY Deployment");
    for pod in &pods {
        validation_passed(&cluster, pod);
        cluster.assert_proxied(&reached, &name_of(pod), 3);
        // The node reaches the pod from the bridge's address: the application sees it, not
        // the proxy's.
        assert_eq!(inbound(&cluster, pod), GATEWAY, "{}", name_of(pod));
    }
    let listed = cluster.listed().expect("redirect list");
    assert!(
        listed.iter().any(|e| e["tproxy"] == true),
        "no TPROXY enrollment listed: {listed:?}"
    );
}
