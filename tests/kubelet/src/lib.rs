//! A kubelet-lite for the tests and the bench: Debian's containerd started as a node's runtime
//! ([`node::CriNode`]: its own state, host network and mount namespace, cgroup root), driven over
//! its CRI ([`cri::Cri`], the `k8s-cri` bindings) exactly as a kubelet drives it, running
//! Kubernetes Pod objects ([`kubelet::Kubelet`], [`pod`]) with images built here ([`images`]).
pub mod config;
pub mod cri;
pub mod images;
pub mod kubelet;
pub mod node;
pub mod pod;
#[cfg(test)]
mod pod_tests;
pub mod quantity;
pub mod service_account;
pub mod status;

pub use cri::{Cri, CriError};
pub use kubelet::{Kubelet, RunningPod, StartError};
pub use node::CriNode;
pub use pod::{NodeInfo, Override};
