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
    let kubeconfig = api.kubeconfig().display().to_string();
    let _daemon = node
        .daemon_with(&["--kubeconfig", &kubeconfig, "--cluster-dns", "10.96.0.10"])
        .0;
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
