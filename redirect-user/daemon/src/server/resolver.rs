//! Pod requests whose pod is not in the watch's cache are read from the apiserver by their
//! connection's task, before the request goes to the datapath's owner: at most [`WORKERS`]
//! such reads at once, each with its retries (up to istio-cni's 30 x 1 s), holding the
//! client's connection and namespace descriptor. The owner then enrolls in milliseconds;
//! meanwhile every other request (other pods' ADD and DEL, `list`, the tick) is served. A
//! request past the bound is refused at once (fail closed; the runtime retries), and one whose
//! client hung up while its pod was read stops being read at the next attempt and is dropped,
//! not enrolled.
use std::os::fd::AsFd;

use redirect_daemon_api::PodRef;
use tokio::net::UnixStream;

use super::pods::Found;
use crate::apiserver::Kube;

/// Most pods read from the apiserver at once.
pub(super) const WORKERS: usize = 8;

/// `pod` read for the client at the other end of `stream`, until it hangs up.
pub(super) async fn read(kube: &Kube, pod: &PodRef, stream: &UnixStream) -> Found {
    // Work for a client that hung up is dropped between two GETs, freeing the slot.
    kube.pod_when(pod, || !hung_up(stream)).await
}

/// Whether the client at the other end of `stream` has gone (its request was read whole
/// before, so any readable end of file means it hung up).
pub(super) fn hung_up(stream: &impl AsFd) -> bool {
    use rustix::net::{recv, RecvFlags};
    let mut byte = [0u8; 1];
    matches!(
        recv(stream, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Ok((0, _))
    )
}
