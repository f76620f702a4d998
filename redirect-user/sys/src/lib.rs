//! Runtime code shared by the binaries (the proxy, the probes): never test support.
pub mod mountinfo;
pub mod orig_dst;
pub mod peer;
