//! redirect: eBPF replacement for istio-init's iptables capture (library side of the `redirect` CLI).
pub mod adopt;
pub mod cgroup;
pub mod counters;
pub mod datapath;
pub mod enroll;
pub mod error;
pub mod inbound;
pub mod metrics;
pub mod netns;
pub mod object;
pub mod preflight;
pub mod state;
pub mod status;

pub use datapath::{AttachOptions, Datapath};
pub use error::{Error, Result};
