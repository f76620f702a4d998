//! Istio's `istio-validation` init container, which its injector adds in place of istio-init
//! when istio-cni is enabled: `istio-iptables --run-validation --skip-rule-apply` as the
//! proxy's uid, dialling `127.0.0.6:15002` and passing when the connection arrives at its own
//! listener on the inbound port with that original destination. It passes with either binding:
//! with the default (`istio`) one the proxy uid's loopback dial is redirected as Istio's rules
//! redirect it; with a strict one the bypass follows the running istio-validation container
//! until istio-proxy runs (docs/kubernetes.md, "Strict binding"; proven by
//! `cluster_modes::strict_binding_*` and `cri_validation`).
use k8s_openapi::api::core::v1::Pod;

/// The init container's name.
pub const ISTIO_VALIDATION: &str = "istio-validation";

/// What happens to a pod's [`ISTIO_VALIDATION`] container under its binding (`strict`: the
/// bypass starts closed).
#[must_use]
pub fn validation_under(strict: bool) -> &'static str {
    if strict {
        "passes: while it runs, the uid bypass follows its container (found as istio-proxy is), \
            closes when it exits and follows istio-proxy once that runs"
    } else {
        "passes: its dial as the proxy's uid to 127.0.0.6:15002 is redirected to the inbound \
            port, as Istio's rules redirect it"
    }
}

/// Whether `pod` has Istio's `istio-validation` init container.
#[must_use]
pub fn has_istio_validation(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.name == ISTIO_VALIDATION))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_validation_container_is_found_by_its_name() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web"},
            "spec": {"initContainers": [{"name": "istio-validation"}], "containers": []}
        }))
        .expect("pod");
        assert!(has_istio_validation(&pod));
        assert!(!has_istio_validation(&Pod::default()));
    }
}
