//! The datapath of redirect: the BPF object loaded and attached (process-owned or pinned for
//! the node), the maps each namespace's policy is written into, and the views of them.
//!
//! Rooms, each a folder:
//! - `load`: the embedded object, feature probes, preflight, per-program kernel stats;
//! - `attach`: the one attach plan, the per-process datapath of `redirect attach`, its state files;
//! - `node`: the pinned node datapath (creation, layout and owner record, the per-namespace
//!   apply and index, the upgrade in place);
//! - `sizing`: map sizes and per-namespace quotas, shared by both datapaths (the node's pinned
//!   beside it as `DIR/sizing`);
//! - `netns`: `NetnsHandle` (a namespace opened once) and what is read through it: addresses
//!   and routes over rtnetlink, listeners over sock_diag (and `/proc/net/tcp`), the pod's own
//!   files, a running proxy's listener to adopt;
//! - `maps`: typed map access, counters, one namespace's outbound and inbound entries;
//! - `views`: status, explain, stats, trace, metrics, validate (read only);
//! - `sys`: the bpf(2) commands aya lacks.
//!
//! Beside them: `cgroup` (cgroup v2 discovery and checks), `phases` (where an operation's time
//! went) and `error`.
#![warn(unreachable_pub)]
pub mod attach;
pub mod cgroup;
pub mod error;
pub mod load;
pub mod maps;
pub mod netns;
pub mod node;
pub mod phases;
pub mod sizing;
pub mod sys;
pub mod views;

pub use attach::datapath::{AttachOptions, Datapath};
pub use error::{Error, Result};
