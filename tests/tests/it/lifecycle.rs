//! Attach/detach lifecycle, `redirect exec`, `redirect status` and bad input leaving nothing attached.
use std::{net::SocketAddr, process::Command};

use nix::sys::signal::Signal;
use redirect_testkit::{
    cgroup2_root, privileged,
    probe::{ClientResult, Echo},
    Cgroup, Topology,
};
use redirect_tests::{
    attached_program_ids, bin_path, client, program_loaded, Attach, ClientOpts, EchoServer, Proxy,
};

fn root_cgroup() -> std::path::PathBuf {
    cgroup2_root().expect("cgroup2")
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("socket address")
}

/// Rewritten to the proxy: the application's socket has its local end on 127.0.0.1.
fn captured(r: &ClientResult) -> bool {
    r.local
        .is_some_and(|l| l.ip() == std::net::Ipv4Addr::LOCALHOST)
}

#[test]
fn after_attach_stops_nothing_is_redirected_and_nothing_stays_attached() {
    privileged!();
    let topo = Topology::new().expect("topology");
    let cgroup = Cgroup::new("rtd").expect("cgroup");
    let _server = EchoServer::start(&topo.server, "198.18.0.2:7021", "srv");
    let proxy = Proxy::start_in(&topo.pod, Some(cgroup.path()));
    let opts = ClientOpts {
        netns: Some(&topo.pod),
        cgroup: Some(cgroup.path()),
        ..ClientOpts::default()
    };

    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGKILL] {
        let mut attach = Attach::start(cgroup.path(), &[]);
        let ids = attach.program_ids();
        assert_eq!(
            ids.len(),
            12,
            "connect4/6, sendmsg4/6, recvmsg4/6, getpeername4/6, sock_ops, getsockopt, bind4/6"
        );
        assert_eq!(
            attached_program_ids(cgroup.path()).len(),
            8,
            "connect, sendmsg, recvmsg and getpeername (4 and 6) at the pod cgroup"
        );
        let at_root = attached_program_ids(&root_cgroup());
        assert!(
            ids.iter().filter(|id| at_root.contains(id)).count() == 4,
            "sock_ops, getsockopt and bind4/6 at the root"
        );
        let r = client("198.18.0.2:7021", "captured", &opts);
        assert!(captured(&r), "captured: {r:?}");
        assert_eq!(
            r.peer,
            Some(addr("198.18.0.2:7021")),
            "getpeername restored: {r:?}"
        );

        let clean_exit = attach.child.stop(signal);
        assert_eq!(
            clean_exit,
            signal != Signal::SIGKILL,
            "{signal}: exit status"
        );
        assert!(
            attached_program_ids(cgroup.path()).is_empty(),
            "{signal}: program left on the pod cgroup"
        );
        let at_root = attached_program_ids(&root_cgroup());
        for id in &ids {
            assert!(
                !at_root.contains(id),
                "{signal}: program {id} left on the root cgroup"
            );
            assert!(!program_loaded(*id), "{signal}: program {id} still loaded");
        }
        let r = client("198.18.0.2:7021", "direct", &opts);
        assert!(r.ok, "{r:?}");
        assert!(
            !captured(&r) && r.peer == Some(addr("198.18.0.2:7021")),
            "{signal}: still redirected after stop: {r:?}"
        );
        // status cleans the state file a killed instance left behind and reports nothing.
        let status = attach.status();
        assert!(
            status["instances"].as_array().is_some_and(Vec::is_empty),
            "{status}"
        );
        if signal == Signal::SIGKILL {
            assert_eq!(
                status["stale_removed"].as_array().map(Vec::len),
                Some(1),
                "{status}"
            );
        }
    }
    assert_eq!(
        proxy.records().len(),
        3,
        "only the three captured connections reached the proxy"
    );
}

#[test]
fn exec_runs_in_the_attached_cgroup_and_status_reports_attachments() {
    privileged!();
    let topo = Topology::new().expect("topology");
    let cgroup = Cgroup::new("rte").expect("cgroup");
    let _server = EchoServer::start(&topo.server, "198.18.0.2:7022", "srv");
    let _proxy = Proxy::start_in(&topo.pod, Some(cgroup.path()));
    let attach = Attach::start(cgroup.path(), &[]);
    // No --cgroup: exec picks the one running attach (scoped by REDIRECT_STATE_DIR).
    let pod_ns = topo.pod.path();
    let client = bin_path("probe-client");
    let out = attach.redirect(&[
        "exec",
        "--",
        client.to_str().expect("utf8"),
        "--netns",
        pod_ns.to_str().expect("utf8"),
        "--connect",
        "198.18.0.2:7022",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: ClientResult = serde_json::from_slice(&out.stdout).expect("probe-client result");
    assert!(captured(&r), "captured: {r:?}");

    let status = attach.status();
    let inst = &status["instances"][0];
    let hooks: Vec<(&str, &str, bool)> = inst["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .map(|a| {
            (
                a["attach_type"].as_str().unwrap_or_default(),
                a["target"].as_str().unwrap_or_default(),
                a["linked"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    let root = root_cgroup();
    let pod = cgroup.path().to_str().expect("utf8");
    let root = root.to_str().expect("utf8");
    assert_eq!(
        hooks,
        [
            ("getsockopt", root, true),
            ("sock_ops", root, true),
            ("bind4", root, true),
            ("bind6", root, true),
            ("sendmsg4", pod, true),
            ("sendmsg6", pod, true),
            ("recvmsg4", pod, true),
            ("recvmsg6", pod, true),
            ("getpeername4", pod, true),
            ("getpeername6", pod, true),
            ("connect4", pod, true),
            ("connect6", pod, true)
        ]
    );
    let text = attach.redirect(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("redirected       1"), "{text}");
}

#[test]
fn proxy_in_its_own_cgroup_still_gets_original_destination() {
    privileged!();
    // Layouts: proxy in a sibling cgroup given as --proxy-cgroup; proxy in the captured cgroup
    // which is also the proxy cgroup.
    for layout in ["sibling", "same"] {
        let topo = Topology::new().expect("topology");
        let app = Cgroup::new("rtg").expect("cgroup");
        let sibling = Cgroup::new("rtq").expect("cgroup");
        let proxy_cg = if layout == "sibling" {
            sibling.path()
        } else {
            app.path()
        };
        let _server = EchoServer::start(&topo.server, "198.18.0.2:7023", "srv");
        let proxy = Proxy::start_in(&topo.pod, Some(proxy_cg));
        let attach = Attach::start(
            app.path(),
            &["--proxy-cgroup", proxy_cg.to_str().expect("utf8")],
        );
        let opts = ClientOpts {
            netns: Some(&topo.pod),
            cgroup: Some(app.path()),
            ..ClientOpts::default()
        };
        let r = client("198.18.0.2:7023", "layout", &opts);
        assert!(
            r.reply.as_ref().is_some_and(|e: &Echo| e.got == "layout"),
            "{layout}: {r:?}"
        );
        assert_eq!(
            proxy.wait_records(1)[0]["orig_dst"],
            "198.18.0.2:7023",
            "{layout}"
        );
        assert_eq!(attach.counter("orig_dst_hit"), 1, "{layout}");
        assert!(
            attached_program_ids(&root_cgroup())
                .iter()
                .all(|id| !attach.program_ids().contains(id)),
            "{layout}: nothing at the root"
        );
    }
}

fn attach_fails(args: &[&str], expect: &[&str]) {
    let out = Command::new(bin_path("redirect"))
        .arg("attach")
        .args(args)
        .output()
        .expect("run redirect");
    assert!(!out.status.success(), "{args:?} must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    for e in expect {
        assert!(err.contains(e), "{args:?}: stderr lacks {e:?}: {err}");
    }
}

#[test]
fn bad_input_is_explained_and_attaches_nothing() {
    privileged!();
    let cgroup = Cgroup::new("rtb").expect("cgroup");
    let cg = cgroup.path().to_str().expect("utf8").to_owned();
    let missing = format!("{cg}/does-not-exist");
    attach_fails(&["--cgroup", &missing], &["does not exist", "mkdir"]);
    attach_fails(
        &["--cgroup", "/tmp"],
        &["not a cgroup v2 directory", "its filesystem is"],
    );
    attach_fails(
        &["--cgroup", &cg, "--proxy-cgroup", "/tmp"],
        &["/tmp", "not a cgroup v2 directory"],
    );
    // On hybrid hosts a v1 hierarchy sits next to the v2 mount: it must be named as such.
    let v1 = std::path::Path::new("/sys/fs/cgroup/cpu");
    if v1.is_dir() && !v1.starts_with(root_cgroup()) {
        attach_fails(
            &["--cgroup", "/sys/fs/cgroup/cpu"],
            &["not a cgroup v2 directory", "its filesystem is cgroup)"],
        );
    }
    attach_fails(
        &["--cgroup", &cg, "--outbound-port", "0"],
        &["--outbound-port", "port 0"],
    );
    attach_fails(
        &["--cgroup", &cg, "--outbound-port", "70000"],
        &["--outbound-port", "above 65535"],
    );
    attach_fails(
        &["--cgroup", &cg, "--proxy-uid", "istio-proxy"],
        &["--proxy-uid", "not a numeric id"],
    );
    attach_fails(
        &["--cgroup", &cg, "--proxy-gid", "1.5"],
        &["--proxy-gid", "not a numeric id"],
    );
    // Not root: run the same binary as nobody.
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(bin_path("redirect"))
        .args(["attach", "--cgroup", &cg])
        .output()
        .expect("setpriv");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("must run as root") && err.contains("65534"),
        "{err}"
    );
    assert!(
        attached_program_ids(cgroup.path()).is_empty(),
        "a failed attach left programs behind"
    );
}
