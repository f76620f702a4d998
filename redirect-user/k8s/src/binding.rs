//! Ours: `redirect.dev/proxy-binding: strict`, a pod's opt-in to a proxy bypass that starts
//! closed (bound to no cgroup until its istio-proxy container runs), as the daemon's
//! `--strict-proxy-binding` gives every pod of a node; and `redirect.dev/reset-uncaptured:
//! "true"`, its opt-in to having its connections outside capture reset (`--reset-uncaptured`).
use k8s_openapi::api::core::v1::Pod;

use crate::{pod::annotation, Error};

/// The annotation.
pub const PROXY_BINDING: &str = "redirect.dev/proxy-binding";
/// The annotation.
pub const RESET_UNCAPTURED: &str = "redirect.dev/reset-uncaptured";

/// Whether `pod` asks that its connections outside capture be reset (`"true"`, any case); a
/// value that is neither true nor false counts as no here, and is refused, named, where the
/// pod's policy is made ([`reset_value`], from [`crate::policy`]).
#[must_use]
pub fn reset_uncaptured(pod: &Pod) -> bool {
    reset_value(pod).unwrap_or(false)
}

/// The reset annotation's value: `true` or `false` (any case) or none; any other value (`yes`,
/// `1`) is refused, named, rather than silently taken as false.
pub(crate) fn reset_value(pod: &Pod) -> Result<bool, Error> {
    match annotation(pod, RESET_UNCAPTURED).map(str::trim) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(other) => Err(Error::invalid(
            &format!("annotation {RESET_UNCAPTURED}"),
            other,
            other,
            "is neither \"true\" nor \"false\"",
        )),
    }
}

/// Whether `pod` asks for a strict binding: `strict` yes, `istio` (istio-iptables' owner match
/// until the proxy runs) or no annotation no; any other value is refused, named.
pub(crate) fn strict(pod: &Pod) -> Result<bool, Error> {
    match annotation(pod, PROXY_BINDING).map(str::trim) {
        None | Some("istio") => Ok(false),
        Some("strict") => Ok(true),
        Some(other) => Err(Error::invalid(
            &format!("annotation {PROXY_BINDING}"),
            other,
            other,
            "is neither strict nor istio",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: Option<&str>) -> Pod {
        let mut v = serde_json::json!({"metadata": {"name": "web", "annotations": {}}});
        if let Some(value) = value {
            v["metadata"]["annotations"][PROXY_BINDING] = value.into();
        }
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn reset_is_true_or_false_and_other_values_are_named() {
        let with = |v: &str| {
            let mut v_pod = serde_json::json!({"metadata": {"name": "web", "annotations": {}}});
            v_pod["metadata"]["annotations"][RESET_UNCAPTURED] = v.into();
            serde_json::from_value::<Pod>(v_pod).expect("pod")
        };
        assert!(!reset_value(&pod(None)).expect("none"));
        assert!(reset_value(&with("True")).expect("true"));
        assert!(!reset_value(&with("false")).expect("false"));
        let err = reset_value(&with("yes")).expect_err("refused").to_string();
        assert!(
            err.contains(RESET_UNCAPTURED) && err.contains("yes"),
            "{err}"
        );
        assert!(!reset_uncaptured(&with("yes")));
    }

    #[test]
    fn strict_is_asked_by_its_annotation_and_other_values_are_named() {
        assert!(!strict(&pod(None)).expect("none"));
        assert!(!strict(&pod(Some("istio"))).expect("istio"));
        assert!(strict(&pod(Some("strict"))).expect("strict"));
        let err = strict(&pod(Some("closed")))
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains(PROXY_BINDING) && err.contains("closed"),
            "{err}"
        );
    }
}
