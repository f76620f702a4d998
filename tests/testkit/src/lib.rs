//! Test support shared by unit tests, integration tests and xtask: guards for network
//! namespaces, cgroups, tmpfs mounts and child processes that clean up on drop, cgroup v2
//! discovery, waiting for a condition, the probe binaries' typed results, a listener builder,
//! a node for `redirect daemon`, the recorded-object apiserver, the conformance topology, the
//! parsers' property-test helpers ([`fuzz`]) and Istio's reference data. Of redirect's own
//! crates it knows only the leaf `redirect-sys` (the mountinfo parser); the commands it runs
//! are the binaries the caller names.
pub mod apiserver;
pub mod cgroup;
pub mod env;
pub mod fuzz;
pub mod listener;
pub mod netns;
pub mod node;
pub mod probe;
pub mod process;
pub mod reference;
pub mod tmpfs;
pub mod wait;
pub mod world;

pub use cgroup::{cgroup2_root, make_pod_cgroup, Cgroup};
pub use env::{in_ci, privileged_or_skip, runs_or_skip, unique_name};
pub use listener::Listen;
pub use netns::{ip, veth, HostLink, Netns, Topology};
pub use node::Node;
pub use process::{Child, Spawn};
pub use tmpfs::Tmpfs;
pub use wait::{eventually, until, TimedOut};
