//! Where istio-cni looks in a pod: its istio-proxy and istio-init containers, their env, annotations and labels.

use k8s_openapi::api::core::v1::{Container, Pod};

pub(crate) use crate::containers::{INIT, PROXY};

/// A pod annotation; one [`crate::trim::READ_ANNOTATIONS`] lists, or a trimmed pod lacks it.
pub(crate) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    debug_assert!(
        crate::trim::READ_ANNOTATIONS.contains(&key),
        "annotation {key} is read but not in trim::READ_ANNOTATIONS: trimmed pods would lack it"
    );
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// A pod label; one [`crate::trim::READ_LABELS`] lists, or a trimmed pod lacks it.
pub(crate) fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    debug_assert!(
        crate::trim::READ_LABELS.contains(&key),
        "label {key} is read but not in trim::READ_LABELS: trimmed pods would lack it"
    );
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map_or(&[], |s| s.containers.as_slice())
}

/// The istio-proxy container: a regular container, or a native sidecar (an init container
/// with `restartPolicy: Always`).
pub(crate) fn proxy(pod: &Pod) -> Option<&Container> {
    containers(pod)
        .iter()
        .find(|c| c.name == PROXY)
        .or_else(|| {
            init_containers(pod)
                .iter()
                .find(|c| c.name == PROXY && c.restart_policy.as_deref() == Some("Always"))
        })
}

/// The istio-init container, wherever it is (istio-cni looks at both lists).
pub(crate) fn istio_init(pod: &Pod) -> Option<&Container> {
    init_containers(pod)
        .iter()
        .chain(containers(pod))
        .find(|c| c.name == INIT)
}

/// A literal env value of a container (`valueFrom` entries have none); one
/// [`crate::trim::READ_ENV`] lists, or a trimmed pod lacks it.
pub(crate) fn env<'a>(c: &'a Container, name: &str) -> Option<&'a str> {
    debug_assert!(
        crate::trim::READ_ENV.contains(&name),
        "env {name} is read but not in trim::READ_ENV: trimmed pods would lack it"
    );
    c.env
        .as_deref()?
        .iter()
        .rev()
        .find(|e| e.name == name)
        .and_then(|e| e.value.as_deref())
}

/// Go's `strconv.ParseBool`, which istio-cni uses for every bool it reads.
pub(crate) fn go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}
