//! The node daemon: owns the pinned datapath, enrolls namespaces on request over a root-only
//! unix socket, keeps one state file per enrollment so a restart re-adopts them, and follows
//! each namespace's addresses.
//!
//! - `server` the loop (the socket, following addresses and `-c` routes; at start it upgrades a
//!   datapath pinned by another build in place before adopting it); `server::followed` each
//!   enrollment's namespace opened once and held; `server::datapath` its hold on the pins and
//!   the sk_lookup static key; `server::pods` the CNI plugin's ADD, DEL, CHECK and GC;
//!   `server::reconcile` this node's pods against the enrollments (in-place enrollment, the
//!   proxy-cgroup binding, unenrolling deleted pods).
//! - `files` the directory (lock, root-only socket, enrollment files, ownership record);
//!   `state` the enrollment file's record (the wire and the files' readers are
//!   `redirect_daemon_api::{wire, records}`); `repair` its check of its own pins and
//!   enrollments each tick (`DIR/health`); `metrics` the Prometheus endpoint.
//! - `apiserver` the kube-rs client (in-cluster or `--kubeconfig`, bounded GET retries);
//!   `pod_cache` this node's pods from a watch; `resolution` each pod's decision and policy,
//!   resolved as it arrives; `pod_cgroups` the kubelet's cgroup tree; `exclusions` the
//!   plugin's exclusions, read from our conflist entry.
//! - `node_taint` a node's readiness taint and its removal (GET, merge patch with the
//!   resourceVersion, again on a conflict); `untaint_controller` the one-replica controller
//!   that removes it once the node's DaemonSet pod is Ready (`ready_nodes` its view of the
//!   pods), the only holder of nodes patch; `untaint` the daemon's own `--untaint`, for
//!   operators who grant the daemon nodes patch themselves.
//! - The socket's protocol, client and path rule are `redirect_daemon_api`'s.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod apiserver;
pub mod cluster_dns;
pub mod credentials;
pub mod error;
pub mod exclusions;
mod files;
pub mod metrics;
pub mod node_taint;
pub mod pod_cache;
#[cfg(test)]
mod pod_cache_tests;
pub mod pod_cgroups;
mod pod_watch;
pub mod ready_nodes;
pub mod repair;
pub mod resolution;
pub mod server;
pub mod state;
pub mod still_wanted;
pub mod untaint;
pub mod untaint_controller;

use std::path::PathBuf;

pub use error::{Error, Result};
pub use files::{forget_direct, record_direct};
use redirect_daemon_api::DaemonDir;
pub use server::{Daemon, Options};

/// The running daemon that owns the datapath pinned at `bpffs`, as (pid, its socket), read
/// from the pinned layout record: whatever this process's `REDIRECT_DAEMON_DIR`, changes to a
/// daemon's datapath go through that daemon so its view stays true.
pub fn owner(bpffs: &std::path::Path) -> Option<(u32, PathBuf)> {
    use redirect_datapath::{check_layout, daemon_up, NodeDatapath, Owner};
    if !NodeDatapath::exists(bpffs) {
        return None;
    }
    let record = check_layout(bpffs).ok()?;
    let up = daemon_up(bpffs, &record);
    match (record.owner, record.daemon_dir) {
        (Owner::Daemon { pid, .. }, Some(dir)) if up => Some((pid, DaemonDir::new(dir).socket())),
        _ => None,
    }
}
