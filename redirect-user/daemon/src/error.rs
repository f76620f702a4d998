//! The daemon's errors: its own (the directory, the lock, a pod request) beside the datapath's,
//! each naming the value and the call (a pod by its `namespace/name (uid)`).
use std::{net::IpAddr, path::PathBuf};

use redirect_daemon_api::{Refusal, RefusalKind};

/// What went wrong in the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The datapath refused or failed.
    #[error(transparent)]
    Datapath(#[from] redirect_datapath::Error),
    /// An enrollment file could not be written.
    #[error("encoding enrollment file {}: {source}", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// Another daemon holds the single-instance lock.
    #[error("another redirect daemon is running (pid {pid}, lock {}): one datapath per node, never \
        two; stop it first or talk to it with `redirect enroll/list`", lock.display())]
    AlreadyRunning {
        /// Pid recorded in the lock file.
        pid: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The daemon directory is not one only the daemon controls.
    #[error("daemon directory {}: {why}; the socket and the enrollment files live there and whoever \
        controls it steers the node's capture: refused to start (remove it, or give a directory \
        root owns with --daemon-dir / REDIRECT_DAEMON_DIR)", dir.display())]
    DirNotPrivate {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A namespace path the daemon cannot keep using (relative, or another process's view).
    #[error("--netns {}: the daemon opens the namespace itself and keeps following it, so give a \
        path that names it from any process and stays valid: /run/netns/NAME, or /proc/PID/ns/net \
        of a long-lived process of the pod (run inside the pod, as istio-init's container, the \
        namespace needs a name under the daemon's /run/netns, which a runtime gives its sandboxes)", path.display())]
    NetnsPath {
        /// The path given.
        path: PathBuf,
    },
    /// A namespace handed over by descriptor that the daemon cannot see by any path it shares
    /// with the caller: it could neither tell when it goes nor find it again after a restart.
    #[error("network namespace {}: the daemon sees no path to it in its own mount namespace (it \
        looked at {}), so it could not follow it or find it after a restart: mount the directory \
        that holds it into the daemon at the same path (the DaemonSet mounts the host's \
        /run/netns, which containerd's /var/run/netns is)", named.display(), looked.join(", "))]
    NetnsNotVisible {
        /// The path the caller named it by.
        named: PathBuf,
        /// The paths looked at.
        looked: Vec<String>,
    },
    /// A pod request without Kubernetes access.
    #[error("the daemon was started without Kubernetes access, so it cannot read {pod}")]
    NoKube {
        /// The pod.
        pod: String,
    },
    /// The apiserver did not give the pod.
    #[error(transparent)]
    Kube(#[from] crate::kube_error::KubeError),
    /// The pod's annotations give no policy that can be applied.
    #[error("{pod} cannot be captured: {reason}")]
    NotCapturable {
        /// The pod.
        pod: String,
        /// The policy's error, naming the annotation.
        reason: String,
    },
    /// CNI_NETNS is relative.
    #[error("CNI_NETNS {} of {pod} is not an absolute path", netns.display())]
    RelativeNetns {
        /// The pod.
        pod: String,
        /// CNI_NETNS.
        netns: PathBuf,
    },
    /// The pod's namespace could not be opened or read.
    #[error("{pod}: {source}")]
    PodNetns {
        /// The pod.
        pod: String,
        /// What failed: the datapath's error, or the namespace not visible to the daemon.
        #[source]
        source: Box<Error>,
    },
    /// A pod request named the host's own network namespace (the daemon's, or init's).
    #[error("{pod}: CNI_NETNS {} is the host's network namespace, not a pod's: refused (capturing \
        the node's own traffic would cut it off; a runtime names the sandbox's namespace)", netns.display())]
    HostNetns {
        /// The pod.
        pod: String,
        /// The path the runtime named.
        netns: PathBuf,
    },
    /// `enroll` (or `istio-iptables` through the daemon) named the host's own network
    /// namespace, by whatever path: only `redirect vm`, made to capture a VM's host, may.
    #[error("{} is the host's network namespace (the daemon's, or init's), not a pod's: refused \
        (capturing the node's own traffic would send its connects to a proxy port nothing listens \
        on; to capture a VM's host, run `redirect vm`)", netns.display())]
    EnrollHostNetns {
        /// The path the client named.
        netns: PathBuf,
    },
    /// The per-pod attach scope could not link the pod's cgroup: the ADD fails (the pod never
    /// starts uncaptured; the kubelet retries the sandbox).
    #[error("{pod}: cannot link the capture programs at its cgroup (attach scope per-pod): {why}")]
    PodCgroup {
        /// The pod.
        pod: String,
        /// What is missing or failed.
        why: String,
    },
    /// The pinned datapath's attach scope cannot be switched to the one asked for: the daemon
    /// does not start, and the pinned datapath keeps capturing as it was.
    #[error("switching the attach scope of {} from {from} to {to} in place: {why}; nothing was \
        changed (start the daemon with --attach-scope {from} to keep it)", dir.display())]
    ScopeSwitch {
        /// The datapath's pins.
        dir: PathBuf,
        /// The pinned scope.
        from: redirect_datapath::AttachScope,
        /// The scope asked for.
        to: redirect_datapath::AttachScope,
        /// Which enrollment stands in the way.
        why: String,
    },
    /// The namespace does not hold an address the primary plugin gave the pod.
    #[error("{pod}: the netns {} does not hold {missing} from prevResult (it holds {held:?})", netns.display())]
    MissingAddress {
        /// The pod.
        pod: String,
        /// CNI_NETNS.
        netns: PathBuf,
        /// The address from prevResult.
        missing: IpAddr,
        /// What the namespace holds.
        held: Vec<IpAddr>,
    },
    /// The pod's policy could not be applied.
    #[error("enrolling {pod}: {source}")]
    Enroll {
        /// The pod.
        pod: String,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// CNI CHECK: the enrollment is not what the pod asks for.
    #[error("{0}")]
    Check(String),
    /// CNI GC: the enrollments that could not be removed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Gc(Vec<Error>),
}

impl Error {
    /// What kind of refusal this error is to the client: asking again later may succeed when
    /// the apiserver did not have the pod (yet), or the watch saw it deleted (the runtime's
    /// retry then meets the pod's replacement); a namespace or pod that cannot be captured as
    /// asked, and a malformed value, stay refused however often asked.
    pub(crate) fn refusal_kind(&self) -> RefusalKind {
        use crate::kube_error::KubeError;
        match self {
            Error::Kube(KubeError::Get { .. } | KubeError::Deleted(_)) => RefusalKind::Retry,
            Error::NotCapturable { .. }
            | Error::NetnsNotVisible { .. }
            | Error::HostNetns { .. }
            | Error::EnrollHostNetns { .. }
            | Error::MissingAddress { .. } => RefusalKind::NotCapturable,
            Error::NetnsPath { .. } | Error::RelativeNetns { .. } => RefusalKind::BadRequest,
            Error::PodNetns { source, .. } | Error::Enroll { source, .. } => {
                // Never a retry: the pod was read already; what failed was its namespace.
                match source.refusal_kind() {
                    RefusalKind::NotCapturable => RefusalKind::NotCapturable,
                    _ => RefusalKind::Failed,
                }
            }
            _ => RefusalKind::Failed,
        }
    }

    /// The refusal the client is sent for this error.
    pub(crate) fn refusal(&self) -> Refusal {
        Refusal::new(self.refusal_kind(), self.to_string())
    }

    /// A failed call on a file of the daemon directory (the datapath's file error: one shape
    /// for every file the node's tools touch).
    pub(crate) fn io(call: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Datapath(redirect_datapath::Error::io(call, path, source))
    }
}

/// The daemon's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
