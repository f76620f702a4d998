//! A CNI ADD naming the host's own network namespace is refused (issue 31, finding 9): a
//! runtime, or anything that can run the plugin, passing `CNI_NETNS=/proc/1/ns/net` (or any host
//! process's) would have
//! the node's own traffic captured as a pod's. The pod's own sandbox still enrolls.
use redirect_testkit::{privileged, unique_name};
use redirect_tests::{
    apiserver::{recorded_pod, PodServer},
    cni::{entry, plugins_missing, CniHost},
    node::Node,
};
use serde_json::Value;

const NODE: &str = "node-hostns";

#[test]
fn an_add_naming_the_hosts_namespace_is_refused_and_nothing_is_enrolled() {
    privileged!(plugins_missing());
    let node = Node::new();
    let api = PodServer::start(&node.dir.join("api"));
    let _daemon = node.pod_daemon(&api, None, &[]).0;
    let conf = entry(&node.dir.join("daemon.sock"));
    let host = CniHost::new();
    let uid = unique_name("uid");
    api.put(&recorded_pod("hello.yaml", "shop", "h-1", &uid, NODE));
    let pod = host.sandbox("shop", "h-1", &uid);
    let listed = || -> Vec<Value> {
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json")
    };

    // A host process's namespace: this test's, where the daemon runs (/proc/1 may not be open
    // to root without CAP_SYS_PTRACE, as here; the plugin runs in the test's CNI host
    // namespace, so its own /proc/self is not the daemon's host). prevResult without
    // addresses: nothing but the namespace itself says it is no pod's.
    let this = format!("/proc/{}/ns/net", std::process::id());
    let mut prev = pod.prev.clone();
    prev["ips"] = serde_json::json!([]);
    let mut call = pod.call.clone();
    call.netns = this.clone().into();
    let ran = host.redirect_cni("ADD", &call, &conf, Some(&prev));
    assert!(!ran.ok(), "ADD with CNI_NETNS={this}: {}", ran.text());
    assert_eq!(ran.json["code"], 100, "{}", ran.text());
    let said = format!("{} {}", ran.json["msg"], ran.json["details"]);
    assert!(said.contains("host's network namespace"), "{said}");
    assert_eq!(listed(), Vec::<Value>::new(), "CNI_NETNS={this} enrolled");
    let ran = pod.redirect_cni("ADD", &conf);
    assert!(ran.ok(), "the pod's own ADD: {}", ran.text());
    assert_eq!(listed().len(), 1);
}

/// `enroll` refuses the host's namespace too (issue 46, finding 5), by inode whatever path
/// names it: this process's (the daemon's own), a bind mount of it elsewhere, and
/// `/proc/1/ns/net` where it can be opened. Enrolling it
/// would send the node's own connects to a proxy port nothing listens on. Nothing is listed.
#[test]
fn enroll_refuses_the_hosts_namespace_by_any_path() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let bound = std::env::temp_dir().join(unique_name("rhostns"));
    std::fs::write(&bound, b"").expect("a mount point");
    let this = format!("/proc/{}/ns/net", std::process::id());
    nix::mount::mount(
        Some(std::path::Path::new(&this)),
        &bound,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind mount of the host's namespace");
    // /proc/1's where this root may open it (not without CAP_SYS_PTRACE, as above).
    let init = std::fs::File::open("/proc/1/ns/net")
        .is_ok()
        .then(|| "/proc/1/ns/net".to_owned());
    let paths: Vec<String> = init
        .into_iter()
        .chain([this, bound.display().to_string()])
        .collect();
    let outcomes: Vec<(String, std::process::Output)> = paths
        .iter()
        .map(|p| {
            let out = node.run(&["enroll", "--netns", p, "--istio-args", "-u 1337 -i '*'"]);
            (p.clone(), out)
        })
        .collect();
    let listed: Vec<Value> =
        serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json");
    let _ = nix::mount::umount2(&bound, nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(&bound);
    for (path, out) in outcomes {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("is the host's network namespace"),
            "enroll --netns {path}: {out:?}"
        );
    }
    assert_eq!(listed, Vec::<Value>::new(), "the host's namespace enrolled");
}
