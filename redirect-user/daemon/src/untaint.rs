//! The node readiness taint (istio-cni's untaint controller, built in): with `--untaint
//! KEY:EFFECT`, once the daemon serves ADDs and the runtime's conflist holds our entry, the
//! daemon removes that taint from its own Node, so pods are scheduled on a new node only once
//! they can be captured there (the operator puts the taint on new nodes). The GET and PATCH run
//! on a thread of their own; the PATCH is a merge patch of the node's taints without ours,
//! carrying the resourceVersion read (a concurrent change of the node fails it: tried again).
use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

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

/// What to untaint, and how far it got.
#[derive(Debug)]
pub struct Untaint {
    /// The taint.
    pub taint: Taint,
    /// Where the runtime's conflists are, as the daemon sees them.
    pub cni_conf_dir: PathBuf,
    node: String,
    done: Arc<AtomicBool>,
    running: Arc<AtomicBool>,
    next_try: Instant,
    /// The wait for the entry was logged (once at info).
    said_waiting: bool,
}

/// Pause after a failed attempt.
const RETRY: Duration = Duration::from_secs(5);

impl Untaint {
    /// Removes `taint` from Node `node` once the entry is in `cni_conf_dir`.
    pub fn new(taint: Taint, cni_conf_dir: PathBuf, node: String) -> Self {
        Self {
            taint,
            cni_conf_dir,
            node,
            done: Arc::default(),
            running: Arc::default(),
            next_try: Instant::now(),
            said_waiting: false,
        }
    }

    /// Whether the taint is gone (removed here, or never there).
    pub fn done(&self) -> bool {
        self.done.load(Ordering::Relaxed)
    }

    /// Every tick: when not done, not running and the entry is in place, starts an attempt.
    pub fn tick(&mut self, rt: &tokio::runtime::Handle, client: Option<&Client>) {
        if self.done() || self.running.load(Ordering::Relaxed) || Instant::now() < self.next_try {
            return;
        }
        self.next_try = Instant::now() + RETRY;
        let in_place = redirect_install::confdir::find(&self.cni_conf_dir)
            .is_ok_and(|found| redirect_install::conflist::has_any(&found.json));
        if !in_place {
            let dir = self.cni_conf_dir.display();
            if self.said_waiting {
                tracing::debug!(%dir, "the node's conflist holds no redirect-cni entry yet: the taint stays");
            } else {
                tracing::info!(%dir, key = %self.taint.key, "the node's conflist holds no redirect-cni entry yet: the taint stays until install-cni puts it in");
                self.said_waiting = true;
            }
            return;
        }
        let Some(client) = client.cloned() else {
            return;
        };
        let (taint, node, done, running) = (
            self.taint.clone(),
            self.node.clone(),
            Arc::clone(&self.done),
            Arc::clone(&self.running),
        );
        running.store(true, Ordering::Relaxed);
        let rt = rt.clone();
        let spawned = std::thread::Builder::new().name("untaint".into()).spawn(move || {
            match rt.block_on(remove(client, &node, &taint)) {
                Ok(true) => {
                    tracing::info!(node = %node, key = %taint.key, effect = %taint.effect, "the plugin entry is in place and ADDs are served: removed the readiness taint");
                    done.store(true, Ordering::Relaxed);
                }
                Ok(false) => {
                    tracing::info!(node = %node, key = %taint.key, "the node has no readiness taint: nothing to remove");
                    done.store(true, Ordering::Relaxed);
                }
                Err(error) => tracing::warn!(node = %node, %error, "removing the readiness taint failed: tried again"),
            }
            running.store(false, Ordering::Relaxed);
        });
        if let Err(error) = spawned {
            self.running.store(false, Ordering::Relaxed);
            tracing::warn!(%error, "starting the untaint thread");
        }
    }
}

/// GETs the node and, when it carries `taint`, PATCHes its taints without it: whether it did.
async fn remove(client: Client, node: &str, taint: &Taint) -> Result<bool, String> {
    let api: Api<Node> = Api::all(client);
    let found = api
        .get(node)
        .await
        .map_err(|e| format!("GET Node {node}: {e}"))?;
    let taints = found
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let ours =
        |t: &k8s_openapi::api::core::v1::Taint| t.key == taint.key && t.effect == taint.effect;
    if !taints.iter().any(ours) {
        return Ok(false);
    }
    let kept: Vec<_> = taints.into_iter().filter(|t| !ours(t)).collect();
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": found.metadata.resource_version},
        "spec": {"taints": kept},
    });
    api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| format!("PATCH Node {node}: {e}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taint_is_key_colon_effect() {
        assert_eq!(
            parse_taint("redirect.dev/not-ready:NoSchedule"),
            Ok(Taint {
                key: "redirect.dev/not-ready".into(),
                effect: "NoSchedule".into()
            })
        );
        for bad in ["no-effect", ":NoSchedule", "k:Sometimes"] {
            assert!(parse_taint(bad).is_err_and(|e| e.contains(bad)), "{bad}");
        }
    }
}
