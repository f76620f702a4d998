//! Runtime code shared by the binaries (the proxy, the probes) and the libraries under them:
//! syscall edges and the Prometheus text format; never test support.
//!
//! Every module is the crate's own: other crates come in only through the doors below.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod mountinfo;
mod orig_dst;
mod peer;
mod prometheus;

// `/proc/self/mountinfo`: parsed (its escaping undone), the cgroup v2 mount found.
pub use mountinfo::{
    cgroup2_mount_in, cgroup2_root, mount_of, parse_mountinfo, unescape as unescape_mountinfo,
    Mount,
};

// `SO_ORIGINAL_DST`: a redirected connection's original destination.
pub use orig_dst::{fold_v4_mapped, ipv4 as original_dst_v4, original_dst, Error as OrigDstError};

// A unix socket's peer: its uid and pid, and held by its pidfd.
pub use peer::{peer_credentials, peer_pidfd, still_there as peer_still_there};

// The Prometheus text format.
pub use prometheus::{Kind as MetricKind, Text as PrometheusText};
