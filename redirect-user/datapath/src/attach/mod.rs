//! Attaching: the one attach plan (which program at which cgroup, in which order, by bpf_link),
//! the per-process datapath of `redirect attach` (links held by the process) and its inbound
//! enrollment, and the instance state files `status` and `exec` read.
pub(crate) mod datapath;
mod enroll;
pub(crate) mod plan;
pub(crate) mod state;
