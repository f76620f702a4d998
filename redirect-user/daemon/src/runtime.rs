//! The daemon's one tokio runtime: every wait on a client, the apiserver or the metrics port is
//! a task on it, while the datapath has one owner, the thread that runs [`crate::Daemon::run`].
//!
//! - Tasks: the socket's accept loop, one task per connection (its request read whole before
//!   a deadline, its pod read from the apiserver when the watch has not listed it, its answer
//!   written), the pod watch, the metrics endpoint (its map reads on the blocking pool).
//! - The owner: enrolls, removes and follows namespaces (it enters them), ticks every second,
//!   and carries out one request at a time, handed to it whole over a bounded channel. No task
//!   ever enters a namespace, so no worker thread of the runtime is ever in another one.

/// Worker threads: a node daemon's tasks wait far more than they compute.
const WORKERS: usize = 2;

/// The daemon's runtime (see the module doc): build it once, before the daemon starts, and
/// hand its handle to [`crate::Kube::new`], [`crate::spawn_metrics`] and
/// [`crate::Daemon::run`].
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_name("daemon-io")
        .enable_all()
        .build()
}
