//! The watch of this node's pods: the apiserver's list and watch (field selector
//! `spec.nodeName`, completed pods left out), a task of the daemon's runtime feeding the
//! [`PodCache`] that ADDs read first.
use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Config};

use crate::pod_cache::PodCache;

/// Pods per page of the watch's (re-)listing: a page is decoded whole, pods untrimmed, so a
/// smaller page than kube-rs's 500 bounds that peak (100 pods of 100 KB: 10 MB of JSON) at the
/// cost of more requests, when a node has that many pods at all.
const LIST_PAGE: u32 = 100;

/// How long one watch request lasts (`timeoutSeconds`) before the watcher asks again from
/// where it was: under kube-rs's own limit (295 s).
const WATCH_TIMEOUT: u32 = 290;

/// Starts the watch of this node's pods (every namespace) as a task on `rt`, feeding the cache
/// it returns. The field selector leaves out other nodes' pods and completed
/// ones (`status.phase` Succeeded or Failed, as kube-scheduler's informer does): the apiserver
/// sends a pod that completes as a deletion, and none of a node's completed pods is sent at
/// all, so their bulk is never read (the cache drops completed pods too, whatever the
/// apiserver sends).
pub(crate) fn watch(
    rt: &tokio::runtime::Handle,
    mut config: Config,
    node: String,
    cluster_dns: Option<IpAddr>,
) -> PodCache {
    // A watch is quiet for as long as the node's pods do not change: it is read with a timeout
    // past the one it asks the apiserver for (WATCH_TIMEOUT), not the GETs' 5 s, which made a
    // quiet node's daemon reconnect (and the apiserver answer it again) every 5 s.
    config.read_timeout = Some(Duration::from_secs(u64::from(WATCH_TIMEOUT) + 15));
    let cache = PodCache::new(cluster_dns);
    let fed = cache.clone();
    rt.spawn(async move {
        let client = match crate::credentials::client(config) {
            Ok(c) => c,
            Err(error) => {
                tracing::error!(%error, "the pod watch cannot start: pods are read with GETs only");
                return;
            }
        };
        let selector = format!("spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed");
        tracing::info!(selector, "watching this node's pods");
        let config = kube::runtime::watcher::Config::default()
            .fields(&selector)
            .timeout(WATCH_TIMEOUT)
            .page_size(LIST_PAGE);
        let events = kube::runtime::watcher(Api::<Pod>::all(client), config);
        fed.follow(kube::runtime::WatchStreamExt::default_backoff(events))
            .await;
    });
    cache
}
