//! Beside another vendor's cgroup `connect4` program, as Cilium's socket-LB attaches its own
//! (docs/operator.md, "Coexistence"): a stand-in socket load balancer
//! (`redirect_datapath::test_support::service_rewrite`, written for this test) rewrites a
//! ClusterIP to a backend in the same hook as ours. The kernel runs a cgroup's programs in the
//! order they were attached, a descendant cgroup's before its ancestors', each seeing the
//! address the one before left; so what the proxy reads as the original destination depends on
//! which ran first:
//! - the load balancer first (attached before us, in the same cgroup or above ours): the backend;
//! - ours first (attached before it, or in the pod's cgroup below its): the ClusterIP, and the
//!   proxy's own connect to it is then balanced to the backend (the proxy's uid is not ours to
//!   capture).
//!
//! Real traffic both ways: the application connects to the ClusterIP, its bytes arrive at the
//! backend through the proxy, whose access record and the application's `getpeername` name the
//! destination each ordering gives.
use std::net::SocketAddrV4;

use redirect_datapath::test_support::service_rewrite;
use redirect_testkit::{privileged, Cgroup, Topology};
use redirect_tests::{client, Attach, ClientOpts, EchoServer, Proxy};

/// The Service's ClusterIP and port (nothing routes it: only the load balancer makes it work).
const CLUSTER_IP: &str = "10.96.0.50:80";

/// What ran first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    /// The load balancer attached before us at the same cgroup.
    Balancer,
    /// Ours attached before the load balancer at the same cgroup.
    Ours,
    /// The load balancer attached first at the parent cgroup (the node's root, as Cilium),
    /// ours at the pod's cgroup below it (`--attach-scope per-pod`'s place).
    OursBelow,
}

/// The application's connect to the ClusterIP; returns (the proxy's `orig_dst`, the
/// application's `getpeername`).
fn run(first: First, port: u16) -> (String, String) {
    let topo = Topology::new().expect("topology");
    let parent = Cgroup::new("coexist").expect("cgroup");
    let pod = parent.child("pod").expect("the pod's cgroup");
    let backend: SocketAddrV4 = format!("{}:{port}", topo.server_ip).parse().expect("addr");
    let server = EchoServer::start(&topo.server, &backend.to_string(), "backend");
    let ours_at = if first == First::OursBelow {
        pod.path()
    } else {
        parent.path()
    };
    let balancer_at = parent.path();
    let service: SocketAddrV4 = CLUSTER_IP.parse().expect("addr");
    let (attach, link) = if first == First::Ours {
        let attach = Attach::start(ours_at, &[]);
        let link = service_rewrite(balancer_at, service, backend).expect("the load balancer");
        (attach, link)
    } else {
        let link = service_rewrite(balancer_at, service, backend).expect("the load balancer");
        (Attach::start(ours_at, &[]), link)
    };
    let proxy = Proxy::start_in(&topo.pod, Some(pod.path()));
    let r = client(
        CLUSTER_IP,
        "hello",
        &ClientOpts {
            netns: Some(&topo.pod),
            cgroup: Some(pod.path()),
            ..ClientOpts::default()
        },
    );
    assert!(r.ok, "{first:?}: {r:?}");
    let reply = r.reply.as_ref().expect("reply");
    assert_eq!(
        (reply.tag.as_str(), reply.got.as_str()),
        ("backend", "hello"),
        "{first:?}"
    );
    assert_eq!(
        server.hits().len(),
        1,
        "{first:?}: one connection at the backend"
    );
    let records = proxy.wait_records(1);
    assert_eq!(
        records.len(),
        1,
        "{first:?}: through the proxy: {records:?}"
    );
    drop((link, attach));
    (
        records[0]["orig_dst"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        r.peer.map(|p| p.to_string()).unwrap_or_default(),
    )
}

#[test]
fn the_proxy_reads_the_backend_when_a_socket_load_balancer_runs_first() {
    privileged!();
    let (orig, peer) = run(First::Balancer, 7301);
    let backend = "198.18.0.2:7301"; // Topology::new's server host

    assert_eq!((orig.as_str(), peer.as_str()), (backend, backend));
}

#[test]
fn the_proxy_reads_the_cluster_ip_when_ours_runs_first() {
    privileged!();
    for (first, port) in [(First::Ours, 7302), (First::OursBelow, 7303)] {
        let (orig, peer) = run(first, port);
        assert_eq!(
            (orig.as_str(), peer.as_str()),
            (CLUSTER_IP, CLUSTER_IP),
            "{first:?}"
        );
    }
}
