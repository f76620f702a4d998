//! The datapath's syscall edges: the bpf(2) commands aya does not expose (on aya-obj's
//! generated kernel bindings), for loading and for an upgrade in place.
pub(crate) mod bpfsys;
pub(crate) mod bpfsys_replace;
