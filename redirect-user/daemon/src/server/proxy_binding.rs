//! The proxy uid/gid bypass of a pod enrolled by the daemon, bound to the cgroup of the pod's
//! container that runs as the proxy now: its running istio-proxy container, or, while none
//! runs, its running `istio-validation` init container (istio-cni's injection: istio-iptables
//! `--run-validation` as the proxy's uid, in its own container, before the proxy starts; its
//! dial to 127.0.0.6 must be the proxy uid's to pass). Each is a child of the pod's directory
//! named by the container's id in the pod's status, holding a process of the enrolled
//! namespace. The bypass is closed (bound to no cgroup) the moment the bound cgroup is gone,
//! until the next such container runs (issue 31, finding 3; issue 45). An open bypass (Istio's
//! own binding, not strict) holds anywhere until the proxy runs: the validation container
//! leaves it as it is.
use redirect_common::NetnsCookie;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ContainerStatus;
use redirect_k8s::Pod;

use super::Daemon;
use crate::pod_cgroups::{bare_container_id, runs_in, PodDir};

/// The proxy's container, as Istio's injector names it.
const PROXY: &str = "istio-proxy";
/// istio-cni's validation init container, as Istio's injector names it.
const VALIDATION: &str = "istio-validation";

/// The runtime id of the running container `name` among `statuses`.
fn running_id<'p>(statuses: &[&'p Option<Vec<ContainerStatus>>], name: &str) -> Option<&'p str> {
    let c = statuses
        .iter()
        .copied()
        .flatten()
        .flatten()
        .find(|c| c.name == name)?;
    let runs = c.state.as_ref().is_some_and(|s| s.running.is_some());
    runs.then(|| c.container_id.as_deref().map(bare_container_id))
        .flatten()
}

/// The container the bypass follows now and its runtime id: the running istio-proxy (a
/// sidecar in `containers`, or a native sidecar in `initContainers`), else the running
/// istio-validation init container.
fn followed(pod: &Pod) -> Option<(&'static str, &str)> {
    let status = pod.status.as_ref()?;
    let both = [&status.container_statuses, &status.init_container_statuses];
    running_id(&both, PROXY).map(|id| (PROXY, id)).or_else(|| {
        running_id(&[&status.init_container_statuses], VALIDATION).map(|id| (VALIDATION, id))
    })
}

/// The container the bypass is to follow: its name, and its cgroup when found (a child of the
/// pod's directory named by its id, holding a process of the enrolled namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    container: &'static str,
    cgroup: Option<PathBuf>,
}

/// The container the bypass is to follow now (none runs: `None`), with its cgroup when it is a
/// child of `dir` holding a process of the enrolled namespace (nsfs inode `netns`).
pub(super) fn proxy_cgroup(pod: &Pod, dir: &PodDir, netns: u64) -> Option<Target> {
    let (container, id) = followed(pod)?;
    let cgroup = dir
        .containers
        .get(id)
        .filter(|c| runs_in(c, netns))
        .cloned();
    Some(Target { container, cgroup })
}

/// Whether the cgroup directory `dir` is the container `id`'s.
fn names(dir: &Path, id: &str) -> bool {
    dir.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(id))
}

/// Whether the binding `current` may not be the followed container's (so the cgroup tree is
/// read): a container is followed and the binding does not name it (a binding to the
/// validation container once the proxy runs), or a binding names a cgroup that is gone.
pub(super) fn binding_stale(pod: &Pod, current: Option<&PathBuf>) -> bool {
    match (followed(pod), current) {
        (_, Some(dir)) if !dir.exists() => true,
        (Some((_, id)), Some(dir)) => !names(dir, id),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

impl Daemon {
    /// Binds enrollment `cookie`'s uid/gid bypass to `target`'s cgroup (its running proxy
    /// container's, or while none runs its validation container's); closes it when the bound
    /// cgroup is gone (the container exited) and no new one runs yet: bound to no cgroup, the
    /// proxy uid/gid is then captured anywhere in the pod (fail closed: any container can stop
    /// its proxy, and an app running as 1337 would otherwise go out uncaptured for each restart
    /// back-off) until the next one is bound. An open bypass is not bound to the validation
    /// container: it holds anywhere, the validation's dial among it.
    pub(super) fn bind_proxy(&mut self, cookie: NetnsCookie, target: Option<Target>) {
        let Some(f) = self.enrollments.get(&cookie) else {
            return;
        };
        let was = &f.record.policy;
        let open = was.proxy_cgroup.is_none() && !was.proxy_bypass_closed;
        if open && target.as_ref().is_some_and(|t| t.container == VALIDATION) {
            return;
        }
        let current = was.proxy_cgroup.clone();
        let found = target.and_then(|t| Some((t.container, t.cgroup.filter(|c| c.is_dir())?)));
        let next = match (&current, found) {
            (_, Some(t)) => Some(t),
            (Some(c), _) if c.exists() => return,
            _ => None,
        };
        let next_cgroup = next.as_ref().map(|(_, c)| c.clone());
        let closed = next.is_none() || was.proxy_bypass_closed;
        if next_cgroup == current && closed == was.proxy_bypass_closed {
            return;
        }
        let Some(f) = self.enrollments.get(&cookie) else {
            return;
        };
        let Some(ns) = &f.ns else { return };
        let mut policy = f.record.policy.clone();
        policy.proxy_cgroup.clone_from(&next_cgroup);
        policy.proxy_bypass_closed = closed;
        let name = f
            .record
            .pod
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        // Applied over the namespace's current policy in place: no capture gap.
        match self.dp.apply(ns, &policy) {
            Ok(applied) => {
                let recorded = self.enrollments.amend(cookie, |r| {
                    r.policy = policy;
                    r.addrs = applied.addrs;
                });
                if let Err(error) = recorded {
                    tracing::warn!(pod = name, %error, "recording the enrollment");
                }
                match &next {
                    Some((container, cgroup)) => {
                        tracing::info!(pod = name, %cookie, container,
                            proxy_cgroup = %cgroup.display(),
                            "the proxy uid/gid bypass follows the {container} container's cgroup")
                    }
                    None => {
                        tracing::warn!(pod = name, %cookie, "the proxy uid/gid bypass is closed: \
                            the container it followed is gone and no istio-proxy container runs, \
                            so the proxy uid/gid is captured anywhere in the pod until one runs")
                    }
                }
            }
            Err(error) => {
                tracing::error!(pod = name, %cookie, %error, "binding the proxy bypass to its \
                    container's cgroup: kept as it was");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const PROXY_ID: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const CHECK_ID: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn state(running: bool) -> Value {
        if running {
            json!({"running": {"startedAt": "2026-12-01T00:00:00Z"}})
        } else {
            json!({"terminated": {"exitCode": 0}})
        }
    }

    fn status(name: &str, id: &str, running: bool) -> Value {
        json!({"name": name, "containerID": format!("containerd://{id}"), "image": "",
               "imageID": "", "ready": running, "restartCount": 0, "state": state(running)})
    }

    /// A pod whose status lists `inits` and `containers`.
    fn pod(inits: Vec<Value>, containers: Vec<Value>) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-1"},
            "status": {"phase": "Pending", "initContainerStatuses": inits,
                       "containerStatuses": containers},
        }))
        .expect("a Pod")
    }

    #[test]
    fn the_running_proxy_is_followed_else_the_running_validation_container() {
        let checking = status(VALIDATION, CHECK_ID, true);
        let checked = status(VALIDATION, CHECK_ID, false);
        let proxy = status(PROXY, PROXY_ID, true);
        let waiting = json!({"name": PROXY, "image": "", "imageID": "", "ready": false,
                             "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}});
        assert_eq!(
            followed(&pod(vec![checking.clone()], vec![waiting.clone()])),
            Some((VALIDATION, CHECK_ID))
        );
        assert_eq!(followed(&pod(vec![checked.clone()], vec![waiting])), None);
        // A sidecar in containers, or a native sidecar in initContainers.
        assert_eq!(
            followed(&pod(vec![checked.clone()], vec![proxy.clone()])),
            Some((PROXY, PROXY_ID))
        );
        assert_eq!(
            followed(&pod(vec![checked, proxy.clone()], vec![])),
            Some((PROXY, PROXY_ID))
        );
        // The proxy wins, even while the validation container runs.
        assert_eq!(
            followed(&pod(vec![checking.clone()], vec![proxy])),
            Some((PROXY, PROXY_ID))
        );
        // Only an init container named istio-validation counts.
        assert_eq!(followed(&pod(vec![], vec![checking])), None);
        assert_eq!(
            followed(&pod(vec![status("istio-init", CHECK_ID, true)], vec![])),
            None
        );
        assert_eq!(followed(&pod(vec![], vec![])), None);
    }

    #[test]
    fn a_binding_to_the_validation_container_is_stale_once_the_proxy_runs_or_it_is_gone() {
        let root = std::env::temp_dir().join(redirect_testkit::unique_name("rpb"));
        let check_dir = root.join(format!("cri-containerd-{CHECK_ID}.scope"));
        let proxy_dir = root.join(format!("cri-containerd-{PROXY_ID}.scope"));
        std::fs::create_dir_all(&check_dir).expect("dir");
        std::fs::create_dir_all(&proxy_dir).expect("dir");
        let checking = pod(vec![status(VALIDATION, CHECK_ID, true)], vec![]);
        let checked = pod(vec![status(VALIDATION, CHECK_ID, false)], vec![]);
        let proxy = pod(
            vec![
                status(VALIDATION, CHECK_ID, false),
                status(PROXY, PROXY_ID, true),
            ],
            vec![],
        );
        // Nothing bound yet while it runs: read the tree.
        assert!(binding_stale(&checking, None));
        assert!(!binding_stale(&checking, Some(&check_dir)));
        // It exited, its cgroup still there: kept (no process can use it); nothing to bind.
        assert!(!binding_stale(&checked, Some(&check_dir)));
        assert!(!binding_stale(&checked, None));
        // The proxy runs: a binding to the validation container is stale, the proxy's is not.
        assert!(binding_stale(&proxy, Some(&check_dir)));
        assert!(!binding_stale(&proxy, Some(&proxy_dir)));
        std::fs::remove_dir_all(&root).expect("clean up");
        // Its cgroup gone: stale, whatever the status says.
        assert!(binding_stale(&checking, Some(&check_dir)));
        assert!(binding_stale(&checked, Some(&check_dir)));
    }

    #[test]
    fn the_target_names_the_container_and_its_cgroup_only_when_it_runs_in_the_namespace() {
        let dir = PodDir {
            dir: PathBuf::from("/nonexistent/pod"),
            containers: [(CHECK_ID.to_owned(), PathBuf::from("/nonexistent/pod/c"))].into(),
        };
        let checking = pod(vec![status(VALIDATION, CHECK_ID, true)], vec![]);
        // No process of the namespace in it (here: no such directory): no cgroup.
        assert_eq!(
            proxy_cgroup(&checking, &dir, 1),
            Some(Target {
                container: VALIDATION,
                cgroup: None
            })
        );
        let checked = pod(vec![status(VALIDATION, CHECK_ID, false)], vec![]);
        assert_eq!(proxy_cgroup(&checked, &dir, 1), None);
        // A directory listing this process, whose namespace is the enrolled one: found.
        let root = std::env::temp_dir().join(redirect_testkit::unique_name("rpb"));
        std::fs::create_dir_all(&root).expect("dir");
        std::fs::write(
            root.join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .expect("procs");
        let own = std::fs::metadata("/proc/self/ns/net").expect("own netns");
        let dir = PodDir {
            dir: PathBuf::from("/nonexistent/pod"),
            containers: [(CHECK_ID.to_owned(), root.clone())].into(),
        };
        let netns = std::os::unix::fs::MetadataExt::ino(&own);
        assert_eq!(
            proxy_cgroup(&checking, &dir, netns),
            Some(Target {
                container: VALIDATION,
                cgroup: Some(root.clone())
            })
        );
        assert_eq!(
            proxy_cgroup(&checking, &dir, netns + 1).and_then(|t| t.cgroup),
            None
        );
        std::fs::remove_dir_all(&root).expect("clean up");
    }
}
