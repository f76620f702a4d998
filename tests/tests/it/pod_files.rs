//! Enrollments of another namespace take DNS servers and user names from the pod's own files
//! (its processes' /etc, seen through /proc/PID/root), never from the host's; with no process
//! and no flag they are refused with a sentence naming the flag to pass.
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use redirect_testkit::{privileged, unique_name, Child};
use redirect_tests::{
    bin_path,
    conformance::{listen, probe, World},
    node::Node,
};

/// The cluster DNS the pod's resolv.conf names (the host's names something else).
const CLUSTER_DNS: &str = "10.96.0.10";
/// A user only the pod's /etc/passwd lists, and its uid.
const POD_USER: (&str, u32) = ("rpfproxy", 4321);

/// Files of the test's own (never the host's /etc), removed on drop.
struct Files(PathBuf);

impl Files {
    /// resolv.conf naming [`CLUSTER_DNS`], and the host's passwd plus [`POD_USER`].
    fn new() -> Self {
        let dir = std::env::temp_dir().join(unique_name("rpf"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(
            dir.join("resolv.conf"),
            format!("search svc.cluster.local\nnameserver {CLUSTER_DNS}\noptions ndots:5\n"),
        )
        .expect("write resolv.conf");
        let mut passwd = std::fs::read_to_string("/etc/passwd").expect("host passwd");
        passwd.push_str(&format!(
            "{}:x:{}:{}::/nonexistent:/usr/sbin/nologin\n",
            POD_USER.0, POD_USER.1, POD_USER.1
        ));
        std::fs::write(dir.join("passwd"), passwd).expect("write passwd");
        Self(dir)
    }

    /// `sh -c` text that bind-mounts them over /etc in a mount namespace of its own, then
    /// runs `then`.
    fn script(&self, then: &str) -> String {
        let d = self.0.display();
        format!(
            "mount --bind {d}/resolv.conf /etc/resolv.conf && mount --bind {d}/passwd /etc/passwd && {then}"
        )
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ip netns exec NS unshare --mount --propagation private sh -c SCRIPT`: the mounts stay in
/// that process's mount namespace.
fn in_pod_mounts(w: &World, script: &str) -> Command {
    let mut cmd = w.pod.exec("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script]);
    cmd
}

/// A process of the pod (its container): its own mount namespace with the pod's files.
fn pod_process(w: &World, files: &Files) -> Child {
    let cmd = in_pod_mounts(w, &files.script("echo ready && exec sleep 3600"));
    let mut child = Child::spawn("pod process", cmd).expect("start the pod's process");
    child
        .wait_line("its ready line", Duration::from_secs(10), |l| l == "ready")
        .expect("pod process ready");
    child
}

fn host_nameservers() -> Vec<String> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix("nameserver "))
        .map(|s| s.trim().to_owned())
        .collect()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_pods_own_resolv_conf_and_passwd_decide_its_enrollment() {
    privileged!();
    let host = host_nameservers();
    assert!(
        !host.iter().any(|s| s == CLUSTER_DNS),
        "the host must name another DNS server than the pod: {host:?}"
    );
    let host_passwd = std::fs::read_to_string("/etc/passwd").expect("host passwd");
    assert!(!host_passwd.contains(&format!("{}:", POD_USER.0)));

    let node = Node::new();
    let _daemon = node.daemon();
    let w = World::new("rpd", false);
    let files = Files::new();
    let _pod = pod_process(&w, &files);
    let netns = w.pod.path().display().to_string();
    // DNS capture from the environment, the proxy's uid from ENVOY_USER: both the pod's.
    let out = node
        .cmd(&["enroll", "--netns", &netns, "--istio-args", "-i '*'"])
        .env("ISTIO_META_DNS_CAPTURE", "true")
        .env("ENVOY_USER", POD_USER.0)
        .output()
        .expect("run redirect enroll");
    assert!(out.status.success(), "enroll: {}", stderr(&out));
    assert!(
        stderr(&out).contains("/root/etc/resolv.conf (pid"),
        "says where the servers came from: {}",
        stderr(&out)
    );
    let list: serde_json::Value =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("json");
    assert_eq!(
        list[0]["policy"]["dns_servers"],
        serde_json::json!([CLUSTER_DNS]),
        "{list}"
    );
    assert_eq!(
        list[0]["policy"]["proxy_uids"],
        serde_json::json!([POD_USER.1]),
        "{list}"
    );

    let explain = |uid: u32, dst: &str| {
        let uid = uid.to_string();
        let args = ["explain", "--netns", &netns, "--uid", &uid, "--dst", dst];
        let out = node.ok(&[&args[..], &["--udp", "--json"]].concat());
        let v: serde_json::Value = serde_json::from_str(&out).expect("json");
        v["outcome"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!(explain(1000, &format!("{CLUSTER_DNS}:53")), "dns:15053");
    for server in &host {
        assert_ne!(
            explain(1000, &format!("{server}:53")),
            "dns:15053",
            "the host's nameserver {server} is not the pod's"
        );
    }
    assert_eq!(
        explain(POD_USER.1, &format!("{CLUSTER_DNS}:53")),
        "untouched"
    );

    // Real UDP from the application to the pod's nameserver lands on the DNS proxy, and the
    // answer comes from the server.
    let _dns = listen(
        &w.pod,
        None,
        Some((POD_USER.1, POD_USER.1)),
        "dns",
        &[],
        &["127.0.0.1:15053".into()],
    );
    let app = probe(
        &w.pod,
        Some(node.cgroup.path()),
        Some((1000, 1000)),
        &[format!("udp:{CLUSTER_DNS}:53")],
    );
    assert_eq!(app[0].at(), "at=dns/127.0.0.1:15053", "{app:?}");
    assert_eq!(
        app[0].peer,
        Some(format!("{CLUSTER_DNS}:53").parse().expect("addr")),
        "{app:?}"
    );
    node.ok(&["uninstall"]);
}

#[test]
fn a_namespace_with_no_process_needs_its_dns_servers_and_defaults_the_proxy_uid() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let w = World::new("rpn", false);
    let netns = w.pod.path().display().to_string();
    let no_process = format!("no process runs in {netns}");
    let out = node.run(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-i '*' -u 1337 --redirect-dns",
    ]);
    assert!(!out.status.success(), "enrolled without DNS servers");
    let err = stderr(&out);
    assert!(
        err.contains(&no_process)
            && err.contains("add --dns-servers LIST")
            && err.contains("to --istio-args")
            && err.contains("host's own files"),
        "{err}"
    );
    // No -u (issue 33): istio-iptables' default, uid and gid 1337, as its user.Lookup failing
    // gives; said in the output.
    let out = node.run(&["enroll", "--netns", &netns, "--istio-args", "-i '*'"]);
    assert!(out.status.success(), "no -u refused: {}", stderr(&out));
    assert!(
        stderr(&out).contains("istio-iptables' default proxy uid 1337"),
        "not said: {}",
        stderr(&out)
    );
    let list: Vec<serde_json::Value> =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list");
    assert_eq!(list[0]["policy"]["proxy_uids"], serde_json::json!([1337]));
    assert_eq!(list[0]["policy"]["proxy_gids"], serde_json::json!([1337]));
    node.ok(&["unenroll", "--netns", &netns]);
    // The same through istio-iptables, which goes through the daemon.
    let out = node
        .cmd(&[
            "istio-iptables",
            "--netns",
            &netns,
            "-u",
            "1337",
            "--redirect-dns",
        ])
        .output()
        .expect("run redirect istio-iptables");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&no_process) && stderr(&out).contains("pass --dns-servers LIST"),
        "{}",
        stderr(&out)
    );
    assert!(node.ok(&["list"]).contains("nothing is captured"));

    // The explicit flags need nothing of the pod.
    node.ok(&[
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        &format!("-i '*' -u 1337 --redirect-dns --dns-servers {CLUSTER_DNS}"),
    ]);
    let list: serde_json::Value =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("json");
    assert_eq!(
        list[0]["policy"]["dns_servers"],
        serde_json::json!([CLUSTER_DNS])
    );
    node.ok(&["uninstall"]);
}

#[test]
fn inside_the_pod_istio_iptables_reads_its_own_files() {
    privileged!();
    // istio-init's case: the command runs in the pod (its namespace, its mounts), no --netns.
    let w = World::new("rpo", false);
    let files = Files::new();
    let redirect = bin_path("redirect");
    let run = format!(
        "exec {} istio-iptables --dry-run --redirect-dns",
        Path::new(&redirect).display()
    );
    let out = in_pod_mounts(&w, &files.script(&run))
        .env("ENVOY_USER", POD_USER.0)
        .output()
        .expect("run redirect istio-iptables in the pod");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{CLUSTER_DNS} -> 15053")),
        "the pod's own resolv.conf: {text}"
    );
    assert!(
        text.contains(&format!("--uid-owner {} -j RETURN", POD_USER.1)),
        "the pod's own passwd: {text}"
    );
}
