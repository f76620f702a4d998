//! The pods of this node as the apiserver's watch (field selector `spec.nodeName`) last told
//! them, each with its decision and policy (resolved by the watch thread as it arrives): ADD
//! reads a pod here first and GETs it only when it is not cached yet.
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
    Init,
    InitDone,
}

/// Shared between the watch thread and the daemon's loop.
#[derive(Debug, Clone, Default)]
pub struct PodCache {
    state: Arc<Mutex<State>>,
    /// The cluster DNS address the pods' policies are resolved with.
    cluster_dns: Option<IpAddr>,
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
    pub fn new(cluster_dns: Option<IpAddr>) -> Self {
        Self {
            state: Arc::default(),
            cluster_dns,
        }
    }

    /// Applies one watch event. A re-list (`Init` .. `InitDone`) replaces the cache whole, so
    /// a pod deleted while the watch was down does not linger. A pod that arrives is resolved
    /// here (its decision and policy), before the lock is taken: an ADD never waits for it.
    pub fn apply(&self, event: Event<Pod>) {
        let resolve = |pod: Pod| (key(&pod), Resolved::new(pod, self.cluster_dns));
        let change = match event {
            Event::Apply(pod) => Change::Apply(resolve(pod)),
            Event::InitApply(pod) => Change::InitApply(resolve(pod)),
            Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                Change::Delete(key(&pod), uid)
            }
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
    pub fn get(&self, namespace: &str, name: &str) -> Option<Resolved> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Whether the watch saw the pod with `uid` deleted.
    pub fn deleted(&self, uid: &str) -> bool {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.deleted_set.contains(uid)
    }

    /// The cache's generation once a first listing completed (no pod is copied).
    pub fn generation(&self) -> Option<u64> {
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        s.synced.then_some(s.generation)
    }

    /// Every cached pod and the cache's generation, once a first listing completed (before
    /// that, `None`: an absent pod may merely not be listed yet).
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
    pub fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pods
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Feeds the cache from `events` until the stream ends; errors are logged (the watcher
    /// retries with its backoff).
    pub async fn follow(&self, events: impl Stream<Item = Result<Event<Pod>, watcher::Error>>) {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => self.apply(e),
                Err(error) => tracing::warn!(%error, "watching this node's pods"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.namespace = Some(ns.into());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(uid.into());
        p
    }

    fn uid(cache: &PodCache, ns: &str, name: &str) -> Option<String> {
        cache.get(ns, name).and_then(|p| p.pod.metadata.uid.clone())
    }

    #[tokio::test]
    async fn a_recorded_watch_stream_fills_updates_and_empties_the_cache() {
        let cache = PodCache::default();
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("shop", "a", "1"))),
            Ok(Event::InitApply(pod("shop", "b", "1"))),
            Ok(Event::InitDone),
            Ok(Event::Apply(pod("shop", "c", "1"))),
            Ok(Event::Apply(pod("shop", "a", "2"))),
            Ok(Event::Delete(pod("shop", "b", "1"))),
        ];
        cache.follow(futures::stream::iter(events)).await;
        assert_eq!(cache.len(), 2);
        assert_eq!(uid(&cache, "shop", "a").as_deref(), Some("2"));
        assert_eq!(uid(&cache, "shop", "b"), None);
        assert_eq!(uid(&cache, "shop", "c").as_deref(), Some("1"));
        assert_eq!(uid(&cache, "other", "a"), None);
        let (generation, pods) = cache.synced().expect("listed");
        assert_eq!((generation, pods.len()), (7, 2));
    }

    #[tokio::test]
    async fn a_relist_replaces_the_cache_whole() {
        let cache = PodCache::default();
        cache.apply(Event::Apply(pod("shop", "gone", "1")));
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(pod("shop", "kept", "1"))),
        ];
        cache.follow(futures::stream::iter(events)).await;
        // Until InitDone the old view stands, and is not the node's whole set.
        assert_eq!(uid(&cache, "shop", "gone").as_deref(), Some("1"));
        assert!(cache.synced().is_none());
        cache.apply(Event::InitDone);
        assert_eq!(uid(&cache, "shop", "gone"), None);
        assert_eq!(uid(&cache, "shop", "kept").as_deref(), Some("1"));
    }
}
