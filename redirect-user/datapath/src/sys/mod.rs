//! The datapath's syscall edges: the bpf(2) commands aya 0.14's public API does not cover for
//! the pins and descriptors the datapath holds (on aya-obj's generated kernel bindings), for
//! loading and for an upgrade in place. Each module's doc says which aya API was looked at and
//! what it lacks.
pub(crate) mod bpfsys;
pub(crate) mod bpfsys_replace;
#[cfg(feature = "test-support")]
pub(crate) mod stand_in;
