//! The pods of this node as the apiserver's watch (field selectors `spec.nodeName` and
//! `status.phase`) last told them, each with its decision and policy (resolved by the watch
//! thread as it arrives) and trimmed to the fields the daemon reads: ADD reads a pod here first
//! and GETs it only when it is not cached yet. Completed pods (Succeeded or Failed) are not
//! kept: they hold no sandbox to enroll, and a node's history of them, whole, outweighed its
//! running pods.
use std::{
    collections::{HashMap, HashSet, VecDeque},
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};

use crate::resolution::Resolved;

type Key = (String, String);

#[derive(Debug, Default)]
struct State {
    /// Shared, not copied, with every reader (a kube-injected pod is kilobytes of objects).
    pods: HashMap<Key, Resolved>,
    /// The listing in progress (between `Init` and `InitDone`): it replaces `pods` whole.
    relist: Option<HashMap<Key, Resolved>>,
    /// A first listing completed: `pods` is the node's whole set (what is not in it is gone).
    synced: bool,
    /// Bumped by every change: the reconcile looks again when it moved.
    generation: u64,
    /// Uids of the last [`DELETED_KEPT`] pods the watch saw deleted, oldest first: an ADD for
    /// one of them (a pod force-deleted while its sandbox was being made) fails at once.
    deleted: VecDeque<String>,
    deleted_set: HashSet<String>,
}

/// How many deleted pods' uids are remembered (a node's pods several times over).
const DELETED_KEPT: usize = 4096;

/// A watch event with its pod resolved (done before the cache is locked).
enum Change {
    Apply((Key, Resolved)),
    InitApply((Key, Resolved)),
    Delete(Key, String),
    /// A pod that completed: dropped (when the cache holds that uid), not remembered as
    /// deleted.
    Finished(Key, String),
    Init,
    InitDone,
}

/// Shared between the watch thread and the daemon's loop.
#[derive(Debug, Clone, Default)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct PodCache {
    state: Arc<Mutex<State>>,
    /// The cluster DNS address the pods' policies are resolved with.
    cluster_dns: Option<IpAddr>,
}

/// Whether `pod` completed (phase Succeeded or Failed, which are final): the kubelet has torn
/// its sandbox down and makes none again, so there is nothing to enroll; a pod being deleted
/// is not one (the watch's deletion says it).
#[must_use]
pub(crate) fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn key(pod: &Pod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

impl PodCache {
    /// An empty cache whose pods' policies are resolved with `cluster_dns`.
    #[must_use]
    pub(crate) fn new(cluster_dns: Option<IpAddr>) -> Self {
        Self {
            state: Arc::default(),
            cluster_dns,
        }
    }

    /// Applies one watch event. A re-list (`Init` .. `InitDone`) replaces the cache whole, so
    /// a pod deleted while the watch was down does not linger. A pod that arrives is resolved
    /// and trimmed here, before the lock is taken: an ADD never waits for it. A completed pod
    /// is dropped, whether it arrives as a change or (the watch's field selector leaves
    /// completed pods out) as a deletion.
    #[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
    pub fn apply(&self, event: Event<Pod>) {
        let resolve = |pod: Pod| {
            let k = key(&pod);
            let before = self.get(&k.0, &k.1);
            (k, Resolved::arrived(pod, self.cluster_dns, before.as_ref()))
        };
        let change = match event {
            Event::Apply(pod) | Event::InitApply(pod) | Event::Delete(pod) if finished(&pod) => {
                Change::Finished(key(&pod), uid(&pod))
            }
            Event::Apply(pod) => Change::Apply(resolve(pod)),
            Event::InitApply(pod) => Change::InitApply(resolve(pod)),
            Event::Delete(pod) => Change::Delete(key(&pod), uid(&pod)),
            Event::Init => Change::Init,
            Event::InitDone => Change::InitDone,
        };
        // What the change replaces is dropped after the lock is released: a re-list's old
        // set is every pod of the node, and freeing it under the lock would hold an ADD's
        // lookup for as long.
        let mut replaced: Option<HashMap<Key, Resolved>> = None;
        let mut gone: Option<Resolved> = None;
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.generation += 1;
        match change {
            Change::Apply((k, pod)) => gone = s.pods.insert(k, pod),
            Change::Delete(k, uid) => {
                gone = s.pods.remove(&k);
                if !uid.is_empty() && s.deleted_set.insert(uid.clone()) {
                    s.deleted.push_back(uid);
                    if s.deleted.len() > DELETED_KEPT {
                        if let Some(old) = s.deleted.pop_front() {
                            s.deleted_set.remove(&old);
                        }
                    }
                }
            }
            Change::Finished(k, uid) => {
                let s = &mut *s;
                let list = s.relist.as_mut().unwrap_or(&mut s.pods);
                let same = |r: &Resolved| r.pod.metadata.uid.as_deref().unwrap_or_default() == uid;
                if list.get(&k).is_some_and(same) {
                    gone = list.remove(&k);
                }
            }
            Change::Init => replaced = s.relist.replace(HashMap::new()),
            Change::InitApply((k, pod)) => {
                gone = match &mut s.relist {
                    Some(list) => list.insert(k, pod),
                    None => s.pods.insert(k, pod),
                };
            }
            Change::InitDone => {
                if let Some(list) = s.relist.take() {
                    replaced = Some(std::mem::replace(&mut s.pods, list));
                }
                s.synced = true;
            }
        }
        drop(s);
        drop((replaced, gone));
    }

    /// The cached pod `namespace/name`, with its resolution.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<Resolved> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Whether the watch saw the pod with `uid` deleted.
    pub(crate) fn deleted(&self, uid: &str) -> bool {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.deleted_set.contains(uid)
    }

    /// The cache's generation once a first listing completed (no pod is copied).
    pub(crate) fn generation(&self) -> Option<u64> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.synced.then_some(s.generation)
    }

    /// Every cached pod and the cache's generation, once a first listing completed (before
    /// that, `None`: an absent pod may merely not be listed yet).
    #[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
    pub fn synced(&self) -> Option<(u64, Vec<Arc<Pod>>)> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.synced.then(|| {
            (
                s.generation,
                s.pods.values().map(|r| Arc::clone(&r.pod)).collect(),
            )
        })
    }

    /// How many pods are cached.
    #[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pods
            .len()
    }

    /// Whether none is.
    #[cfg(feature = "test-support")]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Feeds the cache from `events` until the stream ends; errors are logged (the watcher
    /// retries with its backoff).
    pub(crate) async fn follow(
        &self,
        events: impl Stream<Item = Result<Event<Pod>, watcher::Error>>,
    ) {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => self.apply(e),
                Err(error) => tracing::warn!(%error, "watching this node's pods"),
            }
        }
    }
}
