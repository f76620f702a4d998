//! A node's readiness taint (`KEY:EFFECT`, e.g. `redirect.dev/not-ready:NoSchedule`) and its
//! removal, the one implementation for both callers: the untaint controller
//! (`redirect untaint-controller`, [`crate::untaint_controller`], the shipped way) and the
//! daemon's own `--untaint` ([`crate::untaint`], for operators who grant its nodes patch). A GET
//! of the Node, then a merge patch of its taints less ours carrying the resourceVersion read: a
//! concurrent change of the Node fails it with 409 Conflict and it is read and tried again.
//! Other taints are never touched; a Node without ours is left alone (no PATCH).
use k8s_openapi::api::core::v1::Node;
use kube::{
    api::{Patch, PatchParams},
    Api, Client,
};

/// A taint `KEY:EFFECT` (`redirect.dev/not-ready:NoSchedule`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Its key.
    pub key: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// The readiness taint the deploy/ manifests use.
pub const DEFAULT_TAINT: &str = "redirect.dev/not-ready:NoSchedule";

/// Parses `KEY:EFFECT`; the error names the value.
pub fn parse_taint(text: &str) -> Result<Taint, String> {
    let (key, effect) = text.rsplit_once(':').ok_or_else(|| {
        format!("{text:?} is not KEY:EFFECT (e.g. redirect.dev/not-ready:NoSchedule)")
    })?;
    if key.is_empty() {
        return Err(format!("{text:?} has no key"));
    }
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(format!(
            "{text:?}: the effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    Ok(Taint {
        key: key.to_owned(),
        effect: effect.to_owned(),
    })
}

/// Why a taint's removal failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaintError {
    /// The Node could not be read.
    #[error("GET Node {node}: {source}")]
    Get {
        /// The Node.
        node: String,
        /// kube-rs's error.
        #[source]
        source: kube::Error,
    },
    /// The patch was refused (other than by a conflict).
    #[error("PATCH Node {node}: {source}")]
    Patch {
        /// The Node.
        node: String,
        /// kube-rs's error.
        #[source]
        source: kube::Error,
    },
    /// Every attempt met a concurrent change of the Node.
    #[error(
        "PATCH Node {node}: the Node changed under each of {attempts} attempts (409 Conflict)"
    )]
    Conflicts {
        /// The Node.
        node: String,
        /// Attempts made.
        attempts: u32,
    },
}

/// Attempts of one removal when the Node keeps changing between the GET and the PATCH.
const CONFLICT_ATTEMPTS: u32 = 5;

/// Whether `t` is `taint` (key and effect; the value is not compared).
fn is(taint: &Taint, t: &k8s_openapi::api::core::v1::Taint) -> bool {
    t.key == taint.key && t.effect == taint.effect
}

/// The merge patch that removes `taint` from `node`, or `None` when it does not carry it:
/// every other taint kept in its order, the resourceVersion read carried.
pub(crate) fn removal_patch(node: &Node, taint: &Taint) -> Option<serde_json::Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if !taints.iter().any(|t| is(taint, t)) {
        return None;
    }
    let kept: Vec<_> = taints.into_iter().filter(|t| !is(taint, t)).collect();
    Some(serde_json::json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": kept},
    }))
}

/// GETs Node `node` and, when it carries `taint`, PATCHes its taints without it (again on a
/// 409 Conflict, up to 5 times): whether it removed it.
pub(crate) async fn remove(client: Client, node: &str, taint: &Taint) -> Result<bool, TaintError> {
    let api: Api<Node> = Api::all(client);
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let found = api.get(node).await.map_err(|source| TaintError::Get {
            node: node.to_owned(),
            source,
        })?;
        let Some(patch) = removal_patch(&found, taint) else {
            return Ok(false);
        };
        match api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                tracing::debug!(
                    node,
                    attempt,
                    "the Node changed since it was read: read again"
                );
            }
            Err(source) => {
                return Err(TaintError::Patch {
                    node: node.to_owned(),
                    source,
                })
            }
        }
    }
    Err(TaintError::Conflicts {
        node: node.to_owned(),
        attempts: CONFLICT_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taint_is_key_colon_effect() {
        assert_eq!(
            parse_taint(DEFAULT_TAINT),
            Ok(Taint {
                key: "redirect.dev/not-ready".into(),
                effect: "NoSchedule".into()
            })
        );
        for bad in ["no-effect", ":NoSchedule", "k:Sometimes"] {
            assert!(parse_taint(bad).is_err_and(|e| e.contains(bad)), "{bad}");
        }
    }

    #[test]
    fn the_patch_keeps_every_other_taint_and_carries_the_version() {
        let taint = parse_taint(DEFAULT_TAINT).expect("taint");
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "resourceVersion": "7"},
            "spec": {"taints": [
                {"key": "a", "effect": "NoExecute"},
                {"key": "redirect.dev/not-ready", "value": "true", "effect": "NoSchedule"},
                {"key": "redirect.dev/not-ready", "effect": "NoExecute"}]}}))
        .expect("a Node");
        let patch = removal_patch(&node, &taint).expect("tainted");
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"resourceVersion": "7"}, "spec": {"taints": [
                {"key": "a", "effect": "NoExecute"},
                {"key": "redirect.dev/not-ready", "effect": "NoExecute"}]}})
        );
        let clean: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "NoExecute"}]}}))
        .expect("a Node");
        assert_eq!(removal_patch(&clean, &taint), None);
    }
}
