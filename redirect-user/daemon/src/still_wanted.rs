//! Whether the node still wants our CNI plugin when the DaemonSet's install-cni container
//! stops: an upgrade or a restart (the DaemonSet exists and still selects this node: keep the
//! entry, so new pods wait for the next daemon, fail closed) or its removal (the DaemonSet is
//! gone or being deleted, or no longer selects the node: remove the entry, or the node refuses
//! every new pod for good). Asked of the apiserver as istio-cni asks it; when it cannot say
//! (no access, an error), the entry is kept: a pod that waits is better than one uncaptured.
use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::DaemonSet,
    core::v1::{Node, NodeSelectorRequirement, PodSpec},
};
use kube::Api;

/// What to do with the entry, and why (logged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Keep the plugin installed.
    Keep(String),
    /// Uninstall it.
    Remove(String),
}

/// Asks the apiserver (in-cluster, else `kubeconfig`) about DaemonSet `ns/name` and Node
/// `node`.
pub fn ask(
    kubeconfig: Option<&std::path::Path>,
    (ns, name): &(String, String),
    node: &str,
) -> Exit {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return Exit::Keep(format!("no runtime for the Kubernetes client ({e}): kept")),
    };
    let config = match crate::apiserver::load_config(rt.handle(), kubeconfig) {
        Ok(Some(mut c)) => {
            c.connect_timeout = Some(std::time::Duration::from_secs(5));
            c.read_timeout = Some(std::time::Duration::from_secs(5));
            c
        }
        Ok(None) => {
            return Exit::Keep(
                "no Kubernetes access (not in a cluster, no --kubeconfig): \
            the apiserver cannot say whether the DaemonSet is gone, kept"
                    .into(),
            )
        }
        Err(e) => return Exit::Keep(format!("{e}: kept")),
    };
    let client = {
        let _entered = rt.enter();
        match crate::credentials::client(config) {
            Ok(c) => c,
            Err(e) => return Exit::Keep(format!("the Kubernetes client: {e}: kept")),
        }
    };
    let ds = rt
        .block_on(Api::<DaemonSet>::namespaced(client.clone(), ns).get_opt(name))
        .map_err(|e| e.to_string());
    let found = rt
        .block_on(Api::<Node>::all(client).get_opt(node))
        .map_err(|e| e.to_string());
    decide(&format!("{ns}/{name}"), ds, node, found)
}

/// The decision from what the apiserver answered.
pub(crate) fn decide(
    ds_name: &str,
    ds: Result<Option<DaemonSet>, String>,
    node_name: &str,
    node: Result<Option<Node>, String>,
) -> Exit {
    let ds = match ds {
        Err(e) => return Exit::Keep(format!("reading DaemonSet {ds_name} failed ({e}): kept")),
        Ok(None) => return Exit::Remove(format!("DaemonSet {ds_name} no longer exists: removed")),
        Ok(Some(ds)) => ds,
    };
    if ds.metadata.deletion_timestamp.is_some() {
        return Exit::Remove(format!("DaemonSet {ds_name} is being deleted: removed"));
    }
    let labels = match node {
        Err(e) => return Exit::Keep(format!("reading Node {node_name} failed ({e}): kept")),
        // The node object is gone (the node is being removed): nothing new starts here.
        Ok(None) => return Exit::Remove(format!("Node {node_name} no longer exists: removed")),
        Ok(Some(n)) => n.metadata.labels.unwrap_or_default(),
    };
    let spec = ds.spec.and_then(|s| s.template.spec).unwrap_or_default();
    match selects(&spec, &labels) {
        Ok(true) => Exit::Keep(format!(
            "DaemonSet {ds_name} exists and selects node {node_name} (an upgrade or a restart): \
                kept, new pods wait for the next daemon"
        )),
        Ok(false) => Exit::Remove(format!(
            "DaemonSet {ds_name} no longer selects node {node_name}: removed"
        )),
        Err(e) => Exit::Keep(format!(
            "cannot tell whether DaemonSet {ds_name} selects node {node_name} ({e}): kept"
        )),
    }
}

/// Whether a pod of `spec` may run on a node labelled `labels`: its nodeSelector and its
/// required node affinity (the parts of scheduling that depend on the node's labels).
pub(crate) fn selects(spec: &PodSpec, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    let selector = spec.node_selector.clone().unwrap_or_default();
    if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
        return Ok(false);
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let Some(required) = required else {
        return Ok(true);
    };
    // The terms are ORed; a term's expressions ANDed (fields are not about labels: unknown).
    for term in &required.node_selector_terms {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err("a nodeAffinity term matches node fields".into());
        }
        let mut all = true;
        for r in term.match_expressions.iter().flatten() {
            all &= matches(r, labels)?;
        }
        if all {
            return Ok(true);
        }
    }
    Ok(false)
}

fn matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    let value = labels.get(&r.key);
    let values = r.values.clone().unwrap_or_default();
    Ok(match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return Ok(false);
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        other => return Err(format!("operator {other:?}")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ds(spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(
            json!({"metadata": {"name": "redirect", "namespace": "istio-system"},
            "spec": {"selector": {}, "template": {"spec": spec}}}),
        )
        .expect("a DaemonSet")
    }

    fn node(labels: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}}))
            .expect("a Node")
    }

    fn run(d: Result<Option<DaemonSet>, String>, n: Result<Option<Node>, String>) -> Exit {
        decide("istio-system/redirect", d, "n1", n)
    }

    #[test]
    fn kept_while_the_daemonset_selects_the_node_or_nothing_can_be_said() {
        let spec = json!({"containers": [], "nodeSelector": {"mesh": "on"}});
        let on = node(json!({"mesh": "on"}));
        assert!(
            matches!(run(Ok(Some(ds(spec.clone()))), Ok(Some(on.clone()))), Exit::Keep(r) if r.contains("upgrade"))
        );
        assert!(
            matches!(run(Err("connection refused".into()), Ok(Some(on.clone()))),
                Exit::Keep(r) if r.contains("connection refused"))
        );
        assert!(
            matches!(run(Ok(Some(ds(spec))), Err("forbidden".into())), Exit::Keep(r) if r.contains("forbidden"))
        );
    }

    #[test]
    fn removed_when_the_daemonset_is_gone_or_no_longer_selects_the_node() {
        let on = node(json!({"mesh": "on"}));
        assert!(
            matches!(run(Ok(None), Ok(Some(on.clone()))), Exit::Remove(r) if r.contains("no longer exists"))
        );
        let mut deleting = ds(json!({"containers": []}));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert!(
            matches!(run(Ok(Some(deleting)), Ok(Some(on.clone()))), Exit::Remove(r) if r.contains("being deleted"))
        );
        let other = ds(json!({"containers": [], "nodeSelector": {"mesh": "off"}}));
        assert!(
            matches!(run(Ok(Some(other)), Ok(Some(on))), Exit::Remove(r) if r.contains("no longer selects"))
        );
    }

    #[test]
    fn required_node_affinity_is_evaluated_on_the_labels() {
        let spec: PodSpec =
            serde_json::from_value(json!({"containers": [], "affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a", "b"]},
                                      {"key": "spot", "operator": "DoesNotExist"}]},
                {"matchExpressions": [{"key": "mesh", "operator": "Exists"}]}]}}}}))
            .expect("spec");
        let labels = |v: serde_json::Value| {
            serde_json::from_value::<BTreeMap<String, String>>(v).expect("labels")
        };
        assert_eq!(selects(&spec, &labels(json!({"pool": "a"}))), Ok(true));
        assert_eq!(
            selects(&spec, &labels(json!({"pool": "a", "spot": "1"}))),
            Ok(false)
        );
        assert_eq!(selects(&spec, &labels(json!({"mesh": ""}))), Ok(true));
        assert_eq!(selects(&spec, &labels(json!({"pool": "c"}))), Ok(false));
    }
}
