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
//!   `redirect_daemon_api`'s); `repair` its check of its own pins and
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
//!
//! Every module is the crate's own: the CLI comes in only through the doors below (module
//! paths stay as they are, so log targets such as `redirect_daemon::server::pods` hold). With
//! feature `test-support`, `test_support` opens what the integration tests reach under them.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod apiserver;
mod cluster_dns;
mod credentials;
mod error;
mod exclusions;
mod files;
mod kube_error;
mod metrics;
mod node_taint;
mod pod_cache;
#[cfg(test)]
mod pod_cache_tests;
mod pod_cgroup_twin;
mod pod_cgroups;
mod pod_watch;
mod private_dir;
mod ready_nodes;
mod repair;
mod resolution;
mod runtime;
mod server;
mod state;
mod still_wanted;
#[cfg(feature = "test-support")]
pub mod test_support;
mod untaint;
mod untaint_controller;

use std::path::PathBuf;

use redirect_daemon_api::DaemonDir;

// What went wrong.
pub use error::{Error, Result};

// The daemon itself (`redirect daemon`) and its one runtime, and `redirect attach`'s records
// in its directory.
pub use files::{forget_direct, record_direct};
pub use runtime::runtime;
pub use server::{Daemon, Options};

// The apiserver client and its flags' parsers (the cluster DNS Service, the readiness taint).
pub use apiserver::{Kube, KubeOptions};
pub use cluster_dns::parse_service as parse_dns_service;
pub use kube_error::KubeError;
pub use node_taint::{parse_taint, Taint, DEFAULT_TAINT};

// The Prometheus endpoint, and the health its repair writes (`DIR/health`).
pub use metrics::{spawn as spawn_metrics, Endpoint as MetricsEndpoint};
pub use repair::{read_health, Health};

// `redirect install-cni`'s question on exit: is the plugin still wanted on this node?
pub use still_wanted::{ask as plugin_still_wanted, Exit as PluginExit};

// `redirect untaint-controller`.
pub use untaint_controller::{
    run as run_untaint_controller, ControllerError as UntaintControllerError,
    ControllerOptions as UntaintControllerOptions,
};

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
