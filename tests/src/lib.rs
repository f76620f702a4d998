//! redirect's integration-test harness on the testkit: `redirect attach`, `redirect-proxy`,
//! the probe client, the echo server, a node of the test's own, the conformance topology, the
//! CNI chain and a private podman.
// The package's dependencies serve its test binary and probes; this library uses a few.
#![allow(unused_crate_dependencies)]
pub mod abuse;
pub mod apiserver;
pub mod apiserver_tls;
pub mod cluster;
pub mod cni;
pub mod conformance;
pub mod env;
pub mod flood;
pub mod gate;
pub mod http;
pub mod install_dirs;
pub mod mesh;
pub mod node;
pub mod place;
pub mod podman;
pub mod procs;
pub mod server;
pub mod tokens;
pub mod tproxy_pod;
pub mod trace;
pub mod validation;
pub mod world;

pub use env::bin_path;
pub use procs::{
    attached_program_ids, client, host_client, program_loaded, spawn_client, wait_detached, Attach,
    ClientOpts, Proxy,
};
pub use server::{EchoServer, ServerHit};
