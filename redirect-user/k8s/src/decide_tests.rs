//! The decision rules one by one: each skips the base (meshed) pod for its own reason.

use crate::test_pods::*;
use crate::{decide, Decision, Skip};

fn skipped(reason: Skip) -> Decision {
    Decision::Skipped { reason }
}

#[test]
fn an_injected_native_sidecar_pod_is_meshed() {
    assert_eq!(decide(&injected()), Decision::Meshed);
    assert_eq!(decide(&injected()).to_string(), "meshed");
}

#[test]
fn a_regular_istio_proxy_container_is_meshed() {
    let mut pod = injected();
    let spec = pod.spec.as_mut().unwrap();
    let proxy = spec.init_containers.take().unwrap().remove(0);
    spec.containers.push(k8s_openapi::api::core::v1::Container {
        restart_policy: None,
        ..proxy
    });
    assert_eq!(decide(&pod), Decision::Meshed);
}

#[test]
fn an_init_istio_proxy_without_restart_policy_always_is_no_sidecar() {
    let mut pod = injected();
    proxy_mut(&mut pod).restart_policy = None;
    assert_eq!(decide(&pod), skipped(Skip::NoProxy));
}

#[test]
fn no_istio_proxy_is_skipped() {
    let mut pod = injected();
    pod.spec.as_mut().unwrap().init_containers = None;
    assert_eq!(decide(&pod), skipped(Skip::NoProxy));
}

#[test]
fn no_status_annotation_is_not_injected() {
    let mut pod = injected();
    pod.metadata.annotations = None;
    assert_eq!(decide(&pod), skipped(Skip::NotInjected));
}

#[test]
fn inject_false_skips_and_the_label_beats_the_annotation() {
    let a = annotate(injected(), "sidecar.istio.io/inject", "false");
    assert_eq!(
        decide(&a),
        skipped(Skip::InjectDisabled {
            from: "annotation",
            value: "false".into()
        })
    );
    let relabelled = label(a, "sidecar.istio.io/inject", "true");
    assert_eq!(decide(&relabelled), Decision::Meshed);
    let l = label(injected(), "sidecar.istio.io/inject", "F");
    assert_eq!(
        decide(&annotate(l, "sidecar.istio.io/inject", "true")),
        skipped(Skip::InjectDisabled {
            from: "label",
            value: "F".into()
        })
    );
    // Not a bool: istio-cni ignores it.
    assert_eq!(
        decide(&annotate(injected(), "sidecar.istio.io/inject", "no")),
        Decision::Meshed
    );
}

#[test]
fn istio_init_present_is_skipped_in_either_list() {
    let pod = with_container(injected(), "istio-init", true);
    assert_eq!(decide(&pod), skipped(Skip::IstioInit));
    assert_eq!(decide(&pod).to_string(), "skipped: istio-init present");
    let pod = with_container(injected(), "istio-init", false);
    assert_eq!(decide(&pod), skipped(Skip::IstioInit));
}

#[test]
fn disable_envoy_is_skipped() {
    let pod = proxy_env(injected(), "DISABLE_ENVOY", "true");
    assert_eq!(decide(&pod), skipped(Skip::EnvoyDisabled));
    let pod = proxy_env(injected(), "DISABLE_ENVOY", "false");
    assert_eq!(decide(&pod), Decision::Meshed);
}

#[test]
fn a_proxy_that_is_not_a_sidecar_is_skipped() {
    let mut pod = injected();
    proxy_mut(&mut pod).args = Some(vec!["proxy".into(), "router".into()]);
    assert_eq!(
        decide(&pod),
        skipped(Skip::NotSidecar {
            proxy_type: "router".into()
        })
    );
}

#[test]
fn host_network_is_never_captured() {
    let mut pod = injected();
    pod.spec.as_mut().unwrap().host_network = Some(true);
    assert_eq!(decide(&pod), skipped(Skip::HostNetwork));
}

#[test]
fn ambient_by_label_or_annotation_is_skipped() {
    let pod = label(injected(), "istio.io/dataplane-mode", "ambient");
    assert_eq!(decide(&pod), skipped(Skip::Ambient { from: "label" }));
    let pod = annotate(injected(), "istio.io/dataplane-mode", "ambient");
    assert_eq!(decide(&pod), skipped(Skip::Ambient { from: "annotation" }));
    let pod = label(injected(), "istio.io/dataplane-mode", "none");
    assert_eq!(decide(&pod), Decision::Meshed);
}
