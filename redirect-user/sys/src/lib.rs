//! Runtime code shared by the binaries (the proxy, the probes) and the libraries under them:
//! syscall edges and the Prometheus text format; never test support.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
pub mod mountinfo;
pub mod orig_dst;
pub mod peer;
pub mod prometheus;
