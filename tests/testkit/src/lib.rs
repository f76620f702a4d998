//! Test support shared by unit tests, integration tests and xtask: guards for network
//! namespaces, cgroups and child processes that clean up on drop, cgroup v2 discovery,
//! waiting for a condition, the probe binaries' typed results, a listener builder, the
//! parsers' property-test helpers ([`fuzz`]) and Istio's reference data. Nothing here knows
//! redirect's own crates.
pub mod cgroup;
pub mod env;
pub mod fuzz;
pub mod listener;
pub mod netns;
pub mod probe;
pub mod process;
pub mod reference;
pub mod wait;

pub use cgroup::{cgroup2_root, Cgroup};
pub use env::{in_ci, privileged_or_skip, runs_or_skip, unique_name};
pub use listener::Listen;
pub use netns::{ip, veth, HostLink, Netns, Topology};
pub use process::{Child, Spawn};
pub use wait::{eventually, until, TimedOut};
