//! Inbound capture with sk_lookup and real traffic: clients on another node, the host and the
//! pod itself; excluded ports; -b lists; no listener; proxy restart; IPv6; two pods side by side.
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use nix::sys::signal::Signal;
use redirect_testkit::{
    eventually, privileged, probe::ClientResult, Cgroup, HostLink, Netns, Topology,
};
use redirect_tests::{client, host_client, http, Attach, ClientOpts, EchoServer, Proxy};

/// A pod with apps on 22, 9080, 9090 and 15008, enrolled for inbound capture.
struct Pod {
    topo: Topology,
    cgroup: Cgroup,
    _apps: Vec<EchoServer>,
}

impl Pod {
    fn new(pod_ip: &'static str, server_ip: &'static str) -> Self {
        let topo = Topology::with_addresses(pod_ip, server_ip).expect("topology");
        let cgroup = Cgroup::new("rti").expect("cgroup");
        let apps = [22u16, 9080, 9090, 15008]
            .iter()
            .map(|p| EchoServer::start(&topo.pod, &format!("0.0.0.0:{p}"), &format!("app{p}")))
            .collect();
        Self {
            topo,
            cgroup,
            _apps: apps,
        }
    }

    fn spec(&self, keys: &str) -> String {
        format!("{}{keys}", self.topo.pod.path().display())
    }

    fn proxy(&self, extra: &[&str]) -> Proxy {
        Proxy::start_with(&self.topo.pod, Some(self.cgroup.path()), extra)
    }

    /// Connects from the server host to the pod's `port`.
    fn remote(&self, port: u16) -> ClientResult {
        from(&self.topo.server, &format!("{}:{port}", self.topo.pod_ip))
    }
}

fn from(ns: &Netns, dst: &str) -> ClientResult {
    client(
        dst,
        "hi",
        &ClientOpts {
            netns: Some(ns),
            ..ClientOpts::default()
        },
    )
}

/// The proxy's passthrough sources (its hop to the app), IPv4 and IPv6.
const PASSTHROUGH: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6)),
    IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
];

/// True when the app saw the connection come from the proxy's passthrough source.
fn via_proxy(r: &ClientResult) -> bool {
    r.reply
        .as_ref()
        .is_some_and(|e| PASSTHROUGH.contains(&e.peer.ip()))
}

fn direct(r: &ClientResult) -> bool {
    r.ok && !via_proxy(r)
}

/// The tag of the app that answered.
fn tag(r: &ClientResult) -> Option<&str> {
    r.reply.as_ref().map(|e| e.tag.as_str())
}

#[test]
fn inbound_from_another_node_the_host_and_the_pod_itself() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    let attach = Attach::start(pod.cgroup.path(), &["--inbound", &pod.spec("")]);
    let proxy = pod.proxy(&[]);

    let r = pod.remote(9080);
    assert!(via_proxy(&r) && tag(&r) == Some("app9080"), "{r:?}");
    let rec = &proxy.wait_records(1)[0];
    assert_eq!(
        (rec["direction"].as_str(), rec["cluster"].as_str()),
        (Some("inbound"), Some("inbound|9080||"))
    );
    assert_eq!(rec["orig_dst"], "198.18.0.1:9080");
    assert_eq!(
        attach.counter("orig_dst_hit"),
        1,
        "SO_ORIGINAL_DST answered by the getsockopt hook"
    );
    assert_eq!(attach.counter("inbound_steered"), 1);
    assert_eq!(
        attach.counter("inbound_passthrough_source"),
        1,
        "the proxy's 127.0.0.6 hop was not steered"
    );

    // The pod calling its own address: left alone, as istio-iptables' OUTPUT rules do.
    let r = from(&pod.topo.pod, "198.18.0.1:9080");
    assert!(direct(&r), "{r:?}");
    assert_eq!(attach.counter("inbound_local"), 1);

    // The host: a new link and address added after enrollment; the datapath follows it.
    let _link = HostLink::new(&pod.topo.pod, "198.19.77.1", "198.19.77.2").expect("host link");
    eventually(
        "host -> pod to be captured once the address is known",
        Duration::from_secs(5),
        || {
            let r = host_client("198.19.77.2:9080");
            if via_proxy(&r) {
                Ok(())
            } else {
                Err(Box::new(r))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(proxy.wait_records(2)[1]["orig_dst"], "198.19.77.2:9080");
}

#[test]
fn excluded_ports_reach_their_own_listener() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    // A VM's exclude list: Istio's sidecar defaults plus ssh.
    let attach = Attach::start(
        pod.cgroup.path(),
        &["--inbound", &pod.spec(":d=22,15090,15021,15020")],
    );
    let proxy = pod.proxy(&[]);
    assert!(direct(&pod.remote(22)), "ssh is excluded");
    assert!(
        direct(&pod.remote(15008)),
        "the tunnel port is never captured"
    );
    let (status, body) = http::request(
        &pod.topo.server,
        "GET",
        "198.18.0.1:15021",
        "/healthz/ready",
    );
    assert_eq!(
        (status, body.as_str()),
        (200, "ready\n"),
        "readiness probe reaches the proxy directly"
    );
    let (status, body) = http::request(
        &pod.topo.server,
        "GET",
        "198.18.0.1:15020",
        "/stats/prometheus",
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        proxy.records().is_empty(),
        "none of these went through the inbound listener"
    );
    assert_eq!(attach.counter("inbound_excluded_port"), 4);
    assert!(
        via_proxy(&pod.remote(9090)),
        "other ports are still captured"
    );
}

#[test]
fn inbound_port_list_limits_capture() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    let attach = Attach::start(pod.cgroup.path(), &["--inbound", &pod.spec(":b=9080")]);
    let _proxy = pod.proxy(&[]);
    assert!(via_proxy(&pod.remote(9080)));
    assert!(direct(&pod.remote(9090)));
    assert!(direct(&pod.remote(22)));
    assert_eq!(attach.counter("inbound_not_in_list"), 2);
    assert_eq!(attach.counter("inbound_steered"), 1);
}

#[test]
fn without_a_listener_connections_are_refused_and_a_restarted_proxy_is_picked_up() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    let open = Pod::new("198.18.0.1", "198.18.0.2");
    let attach = Attach::start(pod.cgroup.path(), &["--inbound", &pod.spec("")]);
    let _open_attach = Attach::start(
        open.cgroup.path(),
        &["--inbound", &open.spec(":no-listener=passthrough")],
    );

    let r = pod.remote(9080);
    assert!(
        !r.ok,
        "no proxy yet: refused like iptables REDIRECT to a closed port: {r:?}"
    );
    assert!(
        r.error.as_deref().is_some_and(|e| e.contains("refused")),
        "{r:?}"
    );
    assert_eq!(attach.counter("inbound_no_listener"), 1);
    assert!(
        direct(&open.remote(9080)),
        "no-listener=passthrough lets it reach the app"
    );

    let mut proxy = pod.proxy(&[]);
    assert!(via_proxy(&pod.remote(9080)));
    proxy.child.stop(Signal::SIGKILL);
    assert!(!pod.remote(9080).ok, "proxy gone: refused again");
    let proxy = pod.proxy(&[]);
    assert!(
        via_proxy(&pod.remote(9080)),
        "a restarted proxy is picked up"
    );
    assert_eq!(proxy.wait_records(1)[0]["cluster"], "inbound|9080||");
    assert_eq!(attach.counter("inbound_no_listener"), 2);
}

#[test]
fn ipv6_and_dual_stack_inbound() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    let ip = |args: &[&str]| redirect_testkit::ip(args).expect("ip");
    ip(&[
        "-n",
        pod.topo.pod.name(),
        "addr",
        "add",
        "2001:db8::1/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    ip(&[
        "-n",
        pod.topo.server.name(),
        "addr",
        "add",
        "2001:db8::2/64",
        "dev",
        "eth0",
        "nodad",
    ]);
    // Istio adds ::6 to lo for the IPv6 inbound passthrough source.
    ip(&[
        "-n",
        pod.topo.pod.name(),
        "addr",
        "add",
        "::6/128",
        "dev",
        "lo",
    ]);
    let _app6 = EchoServer::start(&pod.topo.pod, "[::]:9081", "app6");
    let attach = Attach::start(pod.cgroup.path(), &["--inbound", &pod.spec("")]);
    let proxy = pod.proxy(&["--inbound", "[::]:15006"]);

    let r = from(&pod.topo.server, "[2001:db8::1]:9081");
    assert!(via_proxy(&r), "{r:?}");
    let rec = &proxy.wait_records(1)[0];
    assert_eq!(rec["orig_dst"], "[2001:db8::1]:9081");
    assert_eq!(rec["cluster"], "inbound|9081||");
    // IPv4 through the same dual-stack listener (v4-mapped accepted socket).
    let r = pod.remote(9080);
    assert!(via_proxy(&r), "{r:?}");
    assert_eq!(proxy.wait_records(2)[1]["orig_dst"], "198.18.0.1:9080");
    assert_eq!(
        attach.counter("orig_dst_hit"),
        2,
        "IP6T_SO_ORIGINAL_DST and SO_ORIGINAL_DST both answered"
    );
}

#[test]
fn two_pods_with_different_policies_side_by_side() {
    privileged!();
    let a = Pod::new("198.18.0.1", "198.18.0.2");
    let b = Pod::new("198.18.1.1", "198.18.1.2");
    // One datapath (one attach, one sk_lookup program) for both pods, as on a node.
    let attach_args = [
        "--inbound".to_owned(),
        a.spec(":d=22"),
        "--inbound".to_owned(),
        b.spec(":b=9090"),
    ];
    let attach_args: Vec<&str> = attach_args.iter().map(String::as_str).collect();
    let attach = Attach::start(a.cgroup.path(), &attach_args);
    let _pa = a.proxy(&[]);
    let _pb = b.proxy(&[]);
    assert!(
        direct(&a.remote(22)) && via_proxy(&a.remote(9080)) && via_proxy(&a.remote(9090)),
        "pod a"
    );
    assert!(
        direct(&b.remote(22)) && direct(&b.remote(9080)) && via_proxy(&b.remote(9090)),
        "pod b"
    );
    assert_eq!(attach.counter("inbound_steered"), 3);

    // The same address in two enrolled namespaces cannot be told apart: refused, nothing attached.
    let c = Pod::new("198.18.0.1", "198.18.0.2");
    let out = std::process::Command::new(redirect_tests::bin_path("redirect"))
        .arg("attach")
        .arg("--cgroup")
        .arg(c.cgroup.path())
        .args(["--inbound", &a.spec(""), "--inbound", &c.spec("")])
        .env(
            "REDIRECT_STATE_DIR",
            std::env::temp_dir().join(redirect_testkit::unique_name("st")),
        )
        .output()
        .expect("run redirect");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("198.18.0.1") && err.contains("already enrolled"),
        "{err}"
    );
    assert!(redirect_tests::attached_program_ids(c.cgroup.path()).is_empty());
}

#[test]
fn a_proxy_already_listening_at_enrollment_is_adopted() {
    privileged!();
    let pod = Pod::new("198.18.0.1", "198.18.0.2");
    // The proxy starts first (e.g. the datapath restarted under a running pod).
    let proxy = pod.proxy(&[]);
    let attach = Attach::start(pod.cgroup.path(), &["--inbound", &pod.spec("")]);
    let r = pod.remote(9080);
    assert!(
        via_proxy(&r),
        "an existing listener must be adopted at enrollment: {r:?}"
    );
    assert_eq!(proxy.wait_records(1)[0]["cluster"], "inbound|9080||");
    assert_eq!(attach.counter("inbound_no_listener"), 0);
}
