//! Test harness: guards for network namespaces, cgroups and processes, plus the probe server.
pub mod conformance;
pub mod env;
pub mod http;
pub mod iptables;
pub mod netns;
pub mod node;
pub mod place;
pub mod procs;
pub mod server;
pub mod world;

pub use env::{bin_path, privileged_or_skip, unique_name};
pub use netns::{Cgroup, HostLink, Netns, Topology};
pub use procs::{
    attached_program_ids, client, program_loaded, spawn_client, Attach, Child, ClientOpts, Proxy,
};
pub use server::{EchoServer, ServerHit};
