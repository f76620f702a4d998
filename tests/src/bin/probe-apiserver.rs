//! probe-apiserver: the recorded-object apiserver (`redirect_tests::apiserver`) as a process,
//! for the CNI ADD benchmark: serves `--count` meshed pods `NAMESPACE/pod-I` (uid `uid-pod-I`)
//! built from a vendored kube-inject manifest and scheduled on `--node` (listed for the
//! daemon's watch and served by GET), writes the kubeconfig
//! naming it to `--kubeconfig`, prints `listening ADDR`, and serves until killed.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::path::PathBuf;

use clap::Parser;
use redirect_tests::apiserver::{recorded_pod, PodServer};

#[derive(Debug, Parser)]
struct Args {
    /// Where the kubeconfig naming this server is written.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The node the pods are scheduled on (`--node-name` of the daemon).
    #[arg(long)]
    node: String,
    /// The pods' namespace.
    #[arg(long, default_value = "bench")]
    namespace: String,
    /// How many pods.
    #[arg(long, default_value_t = 100)]
    count: usize,
    /// The vendored kube-inject manifest the pods are made from.
    #[arg(long, default_value = "hello.yaml")]
    manifest: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = args
        .kubeconfig
        .parent()
        .map_or_else(|| PathBuf::from("."), PathBuf::from);
    let server = PodServer::start(&dir);
    for i in 0..args.count {
        let name = format!("pod-{i}");
        let uid = format!("uid-pod-{i}");
        let pod = recorded_pod(&args.manifest, &args.namespace, &name, &uid, &args.node);
        // Listed (the daemon's watch caches it, as on a node where the pod was scheduled
        // before its sandbox starts) and served by GET.
        server.list(&pod);
        server.put(&pod);
    }
    if server.kubeconfig() != args.kubeconfig {
        std::fs::copy(server.kubeconfig(), &args.kubeconfig)?;
    }
    println!("listening {}", server.addr());
    loop {
        std::thread::park();
    }
}
