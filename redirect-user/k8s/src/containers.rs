//! The container names Istio's injector gives a pod: its sidecar and its iptables init container.

/// The sidecar's container name.
pub(crate) const PROXY: &str = "istio-proxy";
/// The iptables init container's name.
pub(crate) const INIT: &str = "istio-init";
