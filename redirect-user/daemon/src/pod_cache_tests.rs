//! The pod watch's cache: a recorded stream fills, updates and empties it; a re-list replaces
//! it whole; completed pods are dropped; pods are kept trimmed; the unknown-annotation check
//! runs only when what it reads changed.
use k8s_openapi::api::core::v1::{Pod, PodStatus};
use kube::runtime::watcher::Event;

use crate::pod_cache::PodCache;
use crate::resolution::UNKNOWN_CHECKS;

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

/// `p` in `phase`.
fn in_phase(mut p: Pod, phase: &str) -> Pod {
    p.status = Some(PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    p
}

#[test]
fn a_completed_pod_is_dropped_and_not_taken_for_deleted() {
    let cache = PodCache::default();
    cache.apply(Event::Init);
    cache.apply(Event::InitApply(in_phase(
        pod("shop", "job", "1"),
        "Running",
    )));
    cache.apply(Event::InitApply(in_phase(
        pod("shop", "done", "1"),
        "Succeeded",
    )));
    cache.apply(Event::InitDone);
    assert_eq!(uid(&cache, "shop", "done"), None, "listed completed");
    assert_eq!(uid(&cache, "shop", "job").as_deref(), Some("1"));
    // It completes: as a change, or as the deletion the field selector makes of it.
    cache.apply(Event::Apply(in_phase(pod("shop", "job", "1"), "Failed")));
    assert_eq!(uid(&cache, "shop", "job"), None);
    cache.apply(Event::Apply(in_phase(pod("shop", "job2", "2"), "Running")));
    cache.apply(Event::Delete(in_phase(
        pod("shop", "job2", "2"),
        "Succeeded",
    )));
    assert_eq!(uid(&cache, "shop", "job2"), None);
    // Neither is remembered as deleted: an ADD for one reads it from the apiserver.
    assert!(!cache.deleted("1") && !cache.deleted("2"));
    assert_eq!(cache.len(), 0);
    // An old version that completed does not drop the pod now under its name.
    cache.apply(Event::Apply(in_phase(pod("shop", "web", "new"), "Running")));
    cache.apply(Event::Apply(in_phase(
        pod("shop", "web", "old"),
        "Succeeded",
    )));
    assert_eq!(uid(&cache, "shop", "web").as_deref(), Some("new"));
    // A completed pod being deleted is a deletion.
    let mut deleting = in_phase(pod("shop", "web", "new"), "Succeeded");
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
    );
    cache.apply(Event::Delete(deleting));
    assert!(cache.deleted("new"));
}

#[test]
fn a_cached_pod_is_trimmed() {
    let cache = PodCache::default();
    let mut p = in_phase(pod("shop", "web", "1"), "Running");
    p.metadata.annotations = Some(
        [("example.com/blob".to_owned(), "x".repeat(100_000))]
            .into_iter()
            .collect(),
    );
    p.metadata.resource_version = Some("7".into());
    cache.apply(Event::Apply(p));
    let cached = cache.get("shop", "web").expect("cached");
    let json = serde_json::to_string(&*cached.pod).expect("JSON");
    assert!(json.len() < 200, "{json}");
    assert_eq!(
        cached.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
}

/// How many unknown-key checks `f` ran on this thread.
fn checks(f: impl FnOnce()) -> u32 {
    let before = UNKNOWN_CHECKS.with(std::cell::Cell::get);
    f();
    UNKNOWN_CHECKS.with(std::cell::Cell::get) - before
}

fn annotated(uid: &str, keys: &[(&str, &str)]) -> Pod {
    let mut p = in_phase(pod("shop", "web", uid), "Running");
    p.metadata.annotations = Some(
        keys.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    p
}

#[test]
fn the_unknown_annotation_check_runs_only_when_the_keys_it_reads_change() {
    let typo = ("traffic.sidecar.istio.io/excludeOutboundPort", "5432");
    let cache = PodCache::default();
    assert_eq!(
        checks(|| cache.apply(Event::Apply(annotated("1", &[typo])))),
        1
    );
    // The same pod again, a status or a foreign annotation changed: not again.
    let again = || {
        cache.apply(Event::Apply(annotated("1", &[typo])));
        cache.apply(Event::Apply(annotated(
            "1",
            &[typo, ("example.com/x", "1")],
        )));
        cache.apply(Event::Apply(annotated(
            "1",
            &[typo, ("example.com/x", "2")],
        )));
    };
    assert_eq!(checks(again), 0);
    // A re-list of the unchanged pod: not again.
    let relist = || {
        cache.apply(Event::Init);
        cache.apply(Event::InitApply(annotated("1", &[typo])));
        cache.apply(Event::InitDone);
    };
    assert_eq!(checks(relist), 0);
    // A key under Istio's prefixes added, or another pod under the name: checked.
    let other = ("sidecar.istio.io/frobnicate", "x");
    let changed = || cache.apply(Event::Apply(annotated("1", &[typo, other])));
    assert_eq!(checks(changed), 1);
    assert_eq!(
        checks(|| cache.apply(Event::Apply(annotated("2", &[typo, other])))),
        1
    );
    // A GET's pod (no cached version to compare with) is checked.
    assert_eq!(
        checks(|| drop(crate::resolution::Resolved::new(
            annotated("3", &[typo]),
            None
        ))),
        1
    );
}
