//! redirect-proxy with real traffic: clusters, blackhole, registry, inbound, metrics, readiness,
//! and the same results behind our eBPF capture and behind Istio's own iptables rules.
use std::{path::Path, time::Duration};

use redirect_testkit::{
    eventually, privileged, probe::ClientResult, reference, Cgroup, Listen, Topology,
};
use redirect_tests::{bin_path, client, http, Attach, ClientOpts, EchoServer, Proxy};
use serde_json::Value;

/// How capture is done in a scenario.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Capture {
    /// Our programs, attached to the pod's cgroup.
    Ebpf,
    /// Istio's golden rules loaded into the pod's namespace with iptables-restore.
    Iptables(&'static str),
}

/// A pod under one kind of capture, with the proxy inside it.
struct Pod {
    topo: Topology,
    cgroup: Cgroup,
    proxy: Proxy,
    _attach: Option<Attach>,
}

/// The ipnets golden captures 10.0.0.0/8; our test hosts live in 198.18.0.0/15, so the golden's
/// range is mapped there (the same mapping is applied to nothing else).
fn golden(name: &str) -> String {
    reference::golden(name)
        .v4
        .replace("10.0.0.0/8", "198.18.0.0/15")
}

impl Pod {
    fn new(capture: Capture, proxy_args: &[&str]) -> Self {
        let topo = Topology::new().expect("topology");
        let cgroup = Cgroup::new("rtp").expect("cgroup");
        let attach = match capture {
            Capture::Ebpf => None,
            Capture::Iptables(name) => {
                topo.pod
                    .restore("iptables-restore", &golden(name))
                    .expect("load the golden rules");
                None
            }
        };
        let proxy = Proxy::start_with(&topo.pod, Some(cgroup.path()), proxy_args);
        let attach = attach
            .or_else(|| (capture == Capture::Ebpf).then(|| Attach::start(cgroup.path(), &[])));
        Self {
            topo,
            cgroup,
            proxy,
            _attach: attach,
        }
    }

    fn app(&self) -> ClientOpts<'_> {
        ClientOpts {
            netns: Some(&self.topo.pod),
            cgroup: Some(self.cgroup.path()),
            ..ClientOpts::default()
        }
    }
}

/// The parts of an outcome that must not depend on how capture was done.
fn normalise(reply: &ClientResult, record: &Value) -> Value {
    // The server names the peer it saw: keep the address, drop the ephemeral port.
    let echo = reply
        .reply
        .as_ref()
        .map(|e| serde_json::json!({"tag": e.tag, "peer": e.peer.ip(), "got": e.got}));
    serde_json::json!({
        "echo": echo, "reply_bytes": reply.reply_bytes, "status": reply.status, "body": reply.body,
        "cluster": record["cluster"], "orig_dst": record["orig_dst"], "upstream": record["upstream"],
        "flags": record["flags"], "bytes_up": record["bytes_up"], "bytes_down": record["bytes_down"],
        "direction": record["direction"],
    })
}

fn write_registry(dir: &Path) -> String {
    let path = dir.join("registry.json");
    std::fs::write(
        &path,
        r#"{"outbound_traffic_policy": "REGISTRY_ONLY",
            "services": [{"name": "reviews.default.svc.cluster.local", "addresses": ["198.18.0.2"],
                          "ports": [7041], "endpoints": ["198.18.0.3:7041"]},
                         {"name": "ratings.default.svc.cluster.local", "addresses": ["198.18.0.0/24"],
                          "ports": [7042]}]}"#,
    )
    .expect("write registry");
    path.to_str().expect("utf8").to_owned()
}

/// Runs the outbound matrix (registry service, CIDR service, blackhole HTTP, blackhole TCP)
/// under `capture` and returns the normalised outcomes.
fn outbound_matrix(capture: Capture, registry: &str) -> Vec<Value> {
    let pod = Pod::new(capture, &["--registry", registry]);
    redirect_testkit::ip(&[
        "-n",
        pod.topo.server.name(),
        "addr",
        "add",
        "198.18.0.3/24",
        "dev",
        "eth0",
    ])
    .expect("add endpoint address");
    let _endpoint = EchoServer::start(&pod.topo.server, "198.18.0.3:7041", "endpoint");
    let _ratings = EchoServer::start(&pod.topo.server, "198.18.0.2:7042", "ratings");
    let _unknown = EchoServer::start(&pod.topo.server, "198.18.0.2:7043", "unknown");
    let cases = [
        ("198.18.0.2:7041", false),
        ("198.18.0.2:7042", false),
        ("198.18.0.2:7043", true),
        ("198.18.0.2:7043", false),
    ];
    let mut out = Vec::new();
    for (n, (dst, use_http)) in cases.iter().enumerate() {
        let r = client(
            dst,
            "hi",
            &ClientOpts {
                http: *use_http,
                ..pod.app()
            },
        );
        assert!(r.ok, "{capture:?} {dst}: {r:?}");
        let records = pod.proxy.wait_records(n + 1);
        out.push(normalise(&r, &records[n]));
    }
    out
}

#[test]
fn clusters_blackhole_and_registry_match_between_ebpf_and_istio_iptables() {
    privileged!();
    let dir = tempdir("registry");
    let registry = write_registry(&dir);
    let ebpf = outbound_matrix(Capture::Ebpf, &registry);
    // What the outcomes must be, whichever capture is used.
    assert_eq!(
        ebpf[0]["cluster"],
        "outbound|7041||reviews.default.svc.cluster.local"
    );
    assert_eq!(
        ebpf[0]["upstream"], "198.18.0.3:7041",
        "service endpoints replace the original destination"
    );
    assert_eq!(ebpf[0]["echo"]["tag"], "endpoint", "{}", ebpf[0]);
    assert_eq!(
        ebpf[1]["cluster"],
        "outbound|7042||ratings.default.svc.cluster.local"
    );
    assert_eq!(ebpf[1]["upstream"], "198.18.0.2:7042");
    assert_eq!(ebpf[2]["cluster"], "BlackHoleCluster", "{:?}", ebpf);
    assert_eq!(ebpf[2]["status"], 503, "{}", ebpf[2]);
    assert_eq!(ebpf[2]["body"], "no healthy upstream");
    assert_eq!(ebpf[2]["flags"], "NR");
    assert_eq!(ebpf[3]["cluster"], "BlackHoleCluster");
    assert!(
        ebpf[3]["echo"].is_null() && ebpf[3]["reply_bytes"] == 0,
        "non-HTTP TCP to the blackhole is closed: {}",
        ebpf[3]
    );
    for (i, o) in ebpf.iter().enumerate() {
        assert_eq!(o["direction"], "outbound", "{i}");
        assert!(
            o["orig_dst"]
                .as_str()
                .is_some_and(|d| d.starts_with("198.18.0.2:704")),
            "{o}"
        );
    }
    // Istio's own rules (ipnets golden, range mapped) with the kernel's SO_ORIGINAL_DST.
    let iptables = outbound_matrix(Capture::Iptables("ipnets"), &registry);
    assert_eq!(
        ebpf, iptables,
        "the proxy must act the same behind eBPF and behind istio-iptables"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn inbound_reaches_the_app_from_127_0_0_6_behind_istio_iptables() {
    privileged!();
    let pod = Pod::new(Capture::Iptables("inbound-ports-wildcard"), &[]);
    let _app = EchoServer::start(&pod.topo.pod, "0.0.0.0:9080", "app");
    // A client on another host dials the pod's address.
    let remote = ClientOpts {
        netns: Some(&pod.topo.server),
        ..ClientOpts::default()
    };
    let r = client("198.18.0.1:9080", "inbound", &remote);
    assert!(r.ok, "{r:?}");
    let reply = r.reply.as_ref().expect("reply");
    assert_eq!(
        (
            reply.tag.as_str(),
            reply.peer.ip().to_string(),
            reply.got.as_str()
        ),
        ("app", "127.0.0.6".to_owned(), "inbound"),
        "{reply:?}"
    );
    let rec = &pod.proxy.wait_records(1)[0];
    assert_eq!(rec["direction"], "inbound");
    assert_eq!(rec["cluster"], "inbound|9080||");
    assert_eq!(rec["orig_dst"], "198.18.0.1:9080");
    assert_eq!(rec["flags"], "-");
    // The proxy's passthrough from 127.0.0.6 was not captured again: the proxy routed one
    // connection in all. Its per-connection counter needs no wait: a capture of its own
    // upstream connect would be a hop the reply above had to come back through, and each hop
    // is counted when it is routed, before it connects on.
    let (status, text) =
        http::request(&pod.topo.pod, "GET", "127.0.0.1:15090", "/stats/prometheus");
    assert_eq!(status, 200, "{text}");
    let routed: u64 = text
        .lines()
        .filter(|l| l.starts_with("redirect_proxy_connections_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(routed, 1, "connections the proxy routed:\n{text}");
    assert_eq!(pod.proxy.records().len(), 1);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(redirect_testkit::unique_name(&format!("rt-{tag}-")));
    std::fs::create_dir_all(&dir).expect("mkdir");
    // The proxy runs as uid 1337 and must read files here.
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(&dir)
        .status();
    dir
}

#[test]
fn metrics_move_and_readiness_follows_validation_and_drain() {
    privileged!();
    let topo = Topology::new().expect("topology");
    let cgroup = Cgroup::new("rtm").expect("cgroup");
    let dir = tempdir("metrics");
    let metrics_file = dir.join("bpf.prom");
    let metrics_file = metrics_file.to_str().expect("utf8");
    let _server = EchoServer::start(&topo.server, "198.18.0.2:7061", "srv");
    http::serve_fixed(
        &topo.pod,
        "127.0.0.1:9091",
        "# TYPE app_requests_total counter\napp_requests_total 7\n",
    );
    let proxy = Proxy::start_with(
        &topo.pod,
        Some(cgroup.path()),
        &[
            "--validate",
            "--app-metrics",
            "http://127.0.0.1:9091/metrics",
            "--bpf-metrics-file",
            metrics_file,
        ],
    );
    let attach = Attach::start(cgroup.path(), &["--metrics-file", metrics_file]);

    let (status, body) = http::request(&topo.pod, "GET", "127.0.0.1:15021", "/healthz/ready");
    assert_eq!(
        status, 503,
        "--validate: not ready before a captured connection: {body}"
    );
    assert!(body.contains("not verified"), "{body}");

    let opts = ClientOpts {
        netns: Some(&topo.pod),
        cgroup: Some(cgroup.path()),
        ..ClientOpts::default()
    };
    assert!(client("198.18.0.2:7061", "m", &opts).ok);
    proxy.wait_records(1);
    assert_eq!(
        http::request(&topo.pod, "GET", "127.0.0.1:15021", "/healthz/ready").0,
        200
    );

    let (status, own) = http::request(&topo.pod, "GET", "127.0.0.1:15090", "/stats/prometheus");
    assert_eq!(status, 200);
    http::check_prometheus(&own).unwrap_or_else(|e| panic!("15090: {e}\n{own}"));
    assert!(own.contains("redirect_proxy_connections_total{direction=\"outbound\",cluster=\"PassthroughCluster\"} 1"), "{own}");
    assert!(own.contains("redirect_proxy_sent_bytes_total{direction=\"outbound\",cluster=\"PassthroughCluster\"} 2"), "{own}");

    // The metrics file is rewritten every second; wait for the redirect to show.
    let merged = eventually(
        "the merged metrics on 15020 to show the redirect",
        Duration::from_secs(4),
        || {
            let text = http::request(&topo.pod, "GET", "127.0.0.1:15020", "/stats/prometheus").1;
            if text.contains("redirect_decisions_total{decision=\"redirected\"} 1") {
                Ok(text)
            } else {
                Err(text)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    http::check_prometheus(&merged).unwrap_or_else(|e| panic!("15020: {e}\n{merged}"));
    assert!(
        merged.contains("redirect_decisions_total{decision=\"redirected\"} 1"),
        "{merged}"
    );
    assert!(merged.contains("redirect_proxy_connections_total{direction=\"outbound\",cluster=\"PassthroughCluster\"} 1"), "{merged}");
    assert!(merged.contains("app_requests_total 7"), "{merged}");
    assert_eq!(attach.counter("redirected"), 1);

    // Envoy's drain: listeners close, readiness fails.
    assert_eq!(
        http::request(&topo.pod, "POST", "127.0.0.1:15000", "/drain_listeners").0,
        200
    );
    eventually(
        "readiness to fail (503) and 15001 to refuse after drain",
        Duration::from_secs(5),
        || {
            let ready = http::request(&topo.pod, "GET", "127.0.0.1:15021", "/healthz/ready");
            let outbound = http::request(&topo.pod, "GET", "127.0.0.1:15001", "/").0;
            if ready.0 == 503 && outbound == 0 {
                Ok(())
            } else {
                Err((ready, outbound))
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    drop(attach);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn taken_ports_and_root_are_refused_with_the_flag_named() {
    privileged!();
    let topo = Topology::new().expect("topology");
    let _busy = Listen::on("127.0.0.1:15001")
        .netns(&topo.pod)
        .tcp()
        .expect("bind");
    let out = std::process::Command::new("ip")
        .args(topo.pod.exec_args_as(1337, 1337))
        .arg(bin_path("redirect-proxy"))
        .args(["--outbound", "127.0.0.1:15001"])
        .output()
        .expect("run proxy");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("binding --outbound on 127.0.0.1:15001"),
        "{err}"
    );

    let out = std::process::Command::new(bin_path("redirect-proxy"))
        .output()
        .expect("run proxy");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to run as root"));
}
