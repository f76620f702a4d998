//! Which pods the CNI plugin never hands the daemon and the daemon's reconcile never enrolls in
//! place: one decision for both, read from our conflist entry's `exclude_namespaces` and
//! `daemon_pods` (install-cni writes them; the plugin gets them on stdin, the daemon reads the
//! runtime's conflist).
use serde::{Deserialize, Serialize};

/// install-cni's default `exclude_namespaces`.
pub const DEFAULT_EXCLUDED_NAMESPACE: &str = "kube-system";

/// The daemon's own pods: recognised by namespace and name prefix before any other call, so
/// a node whose daemon is being (re)started never waits on itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonPods {
    /// The DaemonSet's namespace.
    pub namespace: String,
    /// The DaemonSet's name followed by `-` (its pods are named `NAME-xxxxx`).
    pub name_prefix: String,
}

impl Default for DaemonPods {
    fn default() -> Self {
        // deploy/kubernetes/daemonset.yaml: DaemonSet `redirect` in `istio-system`.
        Self {
            namespace: "istio-system".into(),
            name_prefix: "redirect-".into(),
        }
    }
}

/// Our entry's exclusions (its other keys are ignored here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exclusions {
    /// Pod namespaces never captured.
    #[serde(default, rename = "exclude_namespaces")]
    pub namespaces: Vec<String>,
    /// The daemon's own pods.
    #[serde(default, rename = "daemon_pods")]
    pub daemon_pods: DaemonPods,
}

impl Exclusions {
    /// What install-cni writes by default: `kube-system` and the DaemonSet's pods.
    #[must_use]
    pub fn install_default() -> Self {
        Self {
            namespaces: vec![DEFAULT_EXCLUDED_NAMESPACE.to_owned()],
            daemon_pods: DaemonPods::default(),
        }
    }

    /// Why pod `namespace/name` is never captured, if it is not.
    #[must_use]
    pub fn skips(&self, namespace: &str, name: &str) -> Option<String> {
        if self.namespaces.iter().any(|n| n == namespace) {
            return Some(format!("namespace {namespace:?} is in exclude_namespaces"));
        }
        let own = &self.daemon_pods;
        (namespace == own.namespace && name.starts_with(&own.name_prefix)).then(|| {
            format!(
                "the daemon's own pod (daemon_pods: namespace {:?}, name_prefix {:?})",
                own.namespace, own.name_prefix
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_namespaces_and_the_daemons_own_pods_are_skipped_with_the_reason() {
        let e: Exclusions = serde_json::from_value(serde_json::json!({
            "type": "redirect-cni", "exclude_namespaces": ["kube-system", "batch"]
        }))
        .expect("entry");
        assert_eq!(e.daemon_pods, DaemonPods::default());
        assert!(e
            .skips("batch", "job-1")
            .is_some_and(|r| r.contains("batch")));
        assert!(e
            .skips("istio-system", "redirect-x7k2p")
            .is_some_and(|r| r.contains("daemon's own pod")));
        assert_eq!(e.skips("istio-system", "istiod-1"), None);
        assert_eq!(e.skips("shop", "web-1"), None);
        assert_eq!(
            Exclusions::install_default().namespaces,
            [DEFAULT_EXCLUDED_NAMESPACE]
        );
    }
}
