//! deploy/README.md's migration from istio-cni and its rollback, run on a real cluster
//! (`redirect_tests::cluster`) as an operator runs them, under an injected Deployment whose
//! pods connect to the world and serve inbound requests at every step.
//!
//! istio-cni's own plugin cannot run here: `probe-istio-cni` plays it (a chained plugin that
//! applies Istio's nat rules with `iptables-restore` in the pod's namespace at ADD, as
//! istio-cni does), and the test plays istio-cni's node agent (its entry appended to the
//! node's conflist and its binary copied; its uninstall takes both out again).
//!
//! Asserted at every step: istio-cni's running pods are enrolled in place by our daemon once it
//! runs (captured by both) and keep working; each new pod passes istio-validation and each of its connections
//! to the world went through its own proxy (none escaped: it did not start uncaptured); pods
//! that ran across a switch are still captured (their application restarted, its new
//! connections proxied too); an inbound request reaches every pod's application through its
//! proxy. At the end, with the DaemonSet deleted and istio-cni capturing: nothing of ours on
//! the node (no entry, no plugin, no state file, no pins, no program on the node's cgroup, no
//! daemon files).
use std::{path::Path, process::Command, time::Duration};

use redirect_testkit::eventually;
use redirect_tests::{
    cluster::{
        checks::{inbound, validation_passed},
        ops::{name_of, world, Reached},
        parts_or_skip,
        workloads::Injected,
        Cluster,
    },
    env::bin_path,
};
use serde_json::{json, Value};

/// Connections each application makes at each start of its container.
const N: usize = 3;

/// The primary conflist the node's runtime reads.
const CONFLIST: &str = "10-podnet.conflist";

/// Istio's nat rules for istio-cni's default arguments (`-p 15001 -z 15006 -u 1337 -g 1337
/// -m REDIRECT -i * -x "" -b * -d 15090,15021,15020`), as istio-iptables builds them: the
/// vendored golden `inbound-ports-wildcard`'s rules with `-d`'s returns and `-i *`'s redirect.
const ISTIO_RULES: &str = "*nat
:ISTIO_INBOUND - [0:0]
:ISTIO_REDIRECT - [0:0]
:ISTIO_IN_REDIRECT - [0:0]
:ISTIO_OUTPUT - [0:0]
-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN
-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001
-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006
-A PREROUTING -p tcp -j ISTIO_INBOUND
-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN
-A ISTIO_INBOUND -p tcp --dport 15020 -j RETURN
-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT
-A OUTPUT -j ISTIO_OUTPUT
-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT
-A ISTIO_OUTPUT -o lo -m owner ! --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN
-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN
-A ISTIO_OUTPUT -j ISTIO_REDIRECT
COMMIT
";

fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl
        .run(args)
        .unwrap_or_else(|e| panic!("kubectl {}: {e:#}", args.join(" ")))
}

fn conflist(cluster: &Cluster) -> Value {
    let text = std::fs::read_to_string(cluster.node.cni_conf_dir().join(CONFLIST))
        .expect("the primary conflist");
    serde_json::from_str(&text).expect("the conflist is JSON")
}

/// The conflist's plugin types, in chain order.
fn chain(cluster: &Cluster) -> Vec<String> {
    conflist(cluster)["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Writes the conflist as a writer on a node does: a new file renamed over the old.
fn write_conflist(cluster: &Cluster, list: &Value) {
    let path = cluster.node.cni_conf_dir().join(CONFLIST);
    let tmp = path.with_extension("istio-cni.tmp");
    std::fs::write(&tmp, serde_json::to_string_pretty(list).expect("json")).expect("write");
    std::fs::rename(&tmp, &path).expect("rename");
}

/// istio-cni's node agent installing: its binary and rules, then its entry appended.
fn istio_cni_in(cluster: &Cluster) {
    let bin = cluster.node.cni_bin_dir();
    std::fs::copy(bin_path("probe-istio-cni"), bin.join("istio-cni")).expect("copy istio-cni");
    std::fs::write(bin.join("istio-cni.rules"), ISTIO_RULES).expect("the rules");
    let mut list = conflist(cluster);
    list["plugins"].as_array_mut().expect("plugins").push(
        json!({"type": "istio-cni", "rules": "/opt/cni/bin/istio-cni.rules",
            "namespaces": ["shop"]}),
    );
    write_conflist(cluster, &list);
}

/// istio-cni's uninstall: its entry out, then its files.
fn istio_cni_out(cluster: &Cluster) {
    let mut list = conflist(cluster);
    list["plugins"]
        .as_array_mut()
        .expect("plugins")
        .retain(|p| p["type"] != "istio-cni");
    write_conflist(cluster, &list);
    let bin = cluster.node.cni_bin_dir();
    for f in ["istio-cni", "istio-cni.rules"] {
        std::fs::remove_file(bin.join(f)).expect("remove istio-cni's file");
    }
}

fn wait_chain(cluster: &Cluster, want: &[&str]) {
    eventually(
        format!("the chain {want:?}"),
        Duration::from_secs(60),
        || {
            let now = chain(cluster);
            (now == want)
                .then_some(())
                .ok_or_else(|| format!("{now:?}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Every pod of `hello` Ready: istio-validation passed, its connections proxied (`n` each),
/// an inbound request through its proxy.
fn all_captured(cluster: &Cluster, reached: &Reached, replicas: usize, n: usize) -> Vec<Value> {
    let pods = cluster
        .ready_pods("hello", replicas)
        .expect("the Deployment");
    for pod in &pods {
        validation_passed(cluster, pod);
        cluster.assert_proxied(reached, &name_of(pod), n);
        assert_eq!(inbound(cluster, pod), "127.0.0.6", "{}", name_of(pod));
    }
    pods
}

/// The application of each pod restarted (SIGKILL; the kubelet starts it again): its new
/// connections proxied too, so the pod is still captured.
fn still_captured(cluster: &Cluster, reached: &Reached, pods: &[Value], n: usize) {
    for pod in pods {
        let name = name_of(pod);
        let before = cluster.restarts(&name, "hello");
        cluster.kill_container(&name, "hello").expect("kill");
        eventually(
            format!("{name}'s application restarted"),
            Duration::from_secs(120),
            || {
                (cluster.restarts(&name, "hello") > before)
                    .then_some(())
                    .ok_or_else(|| "not yet".to_owned())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        cluster.assert_proxied(reached, &name, n);
        assert_eq!(inbound(cluster, pod), "127.0.0.6", "{name}");
    }
}

fn rollout_restart(cluster: &Cluster) {
    for line in [
        "rollout restart deployment/hello -n shop",
        "rollout status deployment/hello -n shop --timeout=240s",
    ] {
        kubectl(cluster, &line.split(' ').collect::<Vec<_>>());
    }
}

/// Programs attached to the node's cgroup (`bpftool cgroup show`), one line each.
fn attached(cgroup: &Path) -> Vec<String> {
    let out = Command::new("bpftool")
        .arg("cgroup")
        .arg("show")
        .arg(cgroup)
        .output()
        .expect("bpftool");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("ID"))
        .map(str::to_owned)
        .collect()
}

/// Every path under `dir` (directories too, when `dirs`).
fn walk(dir: &Path, dirs: bool, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            if dirs {
                out.push(path.display().to_string());
            }
            walk(&path, dirs, out);
        } else {
            out.push(path.display().to_string());
        }
    }
}

/// What of ours is still on the node: the entry, the plugin, install-cni's state file, any
/// pin (the node's bpffs is its own), any file under /run/redirect, a program on the node's
/// cgroup.
fn ours_left(cluster: &Cluster, cgroup: &Path) -> Vec<String> {
    let mut left = Vec::new();
    if chain(cluster).iter().any(|t| t == "redirect-cni") {
        left.push("our entry".to_owned());
    }
    // install-cni's state file (`redirect_install::STATE_FILE`).
    let state = cluster
        .node
        .cni_conf_dir()
        .join(".redirect-cni-install.state");
    for f in [cluster.node.cni_bin_dir().join("redirect-cni"), state] {
        if f.exists() {
            left.push(f.display().to_string());
        }
    }
    // The kernel's own `maps.debug` and `progs.debug` (bpf_preload) are in every bpffs.
    let mut pins = Vec::new();
    walk(&cluster.node.host_path("/sys/fs/bpf"), true, &mut pins);
    left.extend(
        pins.into_iter()
            .filter(|p| !p.ends_with("/maps.debug") && !p.ends_with("/progs.debug")),
    );
    walk(&cluster.node.host_path("/run/redirect"), false, &mut left);
    left.extend(attached(cgroup));
    left
}

#[test]
fn a_cluster_on_istio_cni_migrates_to_redirect_and_rolls_back_with_every_pod_captured() {
    let Some(parts) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let cluster = Cluster::start(&parts).expect("the cluster");
    let reached = world(&cluster).expect("the world listener");
    // A node of an istio-cni cluster: istio-cni's entry, and no readiness taint of ours.
    let node = cluster.node.name.clone();
    kubectl(
        &cluster,
        &["taint", "nodes", &node, "redirect.dev/not-ready-"],
    );
    istio_cni_in(&cluster);
    let w = Injected::new("hello", 2, &parts.image, N as u32);
    cluster.deploy(&w).expect("the Deployment on istio-cni");
    let first = all_captured(&cluster, &reached, 2, N);
    assert!(cluster.listed().is_err(), "no daemon yet");

    // Migration, step 1: our DaemonSet. Its install-cni stands by (istio-cni is chained) and
    // the pod is Ready by its probes.
    cluster
        .install()
        .expect("kubectl apply of deploy/kubernetes beside istio-cni");
    assert_eq!(chain(&cluster), ["bridge", "istio-cni"]);
    assert!(cluster.node.cni_bin_dir().join("redirect-cni").exists());
    // The daemon's reconcile enrolls istio-cni's running pods in place: captured by both.
    for pod in &first {
        let ip = pod["status"]["podIP"].as_str().expect("podIP").to_owned();
        eventually(
            format!("{} enrolled in place", name_of(pod)),
            Duration::from_secs(60),
            || {
                let listed = cluster.listed().map_err(|e| format!("{e:#}"))?;
                listed
                    .iter()
                    .any(|e| {
                        e["writer"] == "reconcile"
                            && e["addrs"]
                                .as_array()
                                .is_some_and(|a| a.iter().any(|x| x == &ip))
                    })
                    .then_some(())
                    .ok_or_else(|| format!("{listed:?}"))
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    kubectl(
        &cluster,
        &["scale", "deployment/hello", "-n", "shop", "--replicas=3"],
    );
    all_captured(&cluster, &reached, 3, N);

    // Step 2: istio-cni removed; a pod scaled up at once (its ADD next to the switch).
    istio_cni_out(&cluster);
    kubectl(
        &cluster,
        &["scale", "deployment/hello", "-n", "shop", "--replicas=4"],
    );
    wait_chain(&cluster, &["bridge", "redirect-cni"]);
    all_captured(&cluster, &reached, 4, N);
    still_captured(&cluster, &reached, &first, 2 * N);

    // Step 3: the workloads restarted: every pod ours, enrolled by the plugin.
    rollout_restart(&cluster);
    let ours = all_captured(&cluster, &reached, 4, N);
    let listed = cluster.listed().expect("redirect list");
    for pod in &ours {
        let ip = pod["status"]["podIP"].as_str().expect("podIP");
        assert!(
            listed.iter().any(|e| e["writer"] == "cni"
                && e["addrs"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == ip))),
            "{} enrolled by the plugin: {listed:?}",
            name_of(pod)
        );
    }

    // Rollback, step 1: istio-cni installed again; our entry leaves at once.
    istio_cni_in(&cluster);
    wait_chain(&cluster, &["bridge", "istio-cni"]);
    // Step 2: the workloads restarted: istio-cni captures every new pod.
    rollout_restart(&cluster);
    let back = all_captured(&cluster, &reached, 4, N);
    // Step 3: our DaemonSet (then the untaint controller) deleted: capture handed back,
    // nothing of ours left on the node.
    for line in [
        "delete daemonset redirect -n istio-system --wait=true",
        "delete deployment redirect-untaint -n istio-system --wait=true",
    ] {
        kubectl(&cluster, &line.split(' ').collect::<Vec<_>>());
    }
    let cgroup = cluster.node.cgroup.path().to_owned();
    eventually(
        "nothing of ours on the node",
        Duration::from_secs(120),
        || {
            let left = ours_left(&cluster, &cgroup);
            left.is_empty()
                .then_some(())
                .ok_or_else(|| format!("{left:?}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.describe("istio-system")));
    assert_eq!(chain(&cluster), ["bridge", "istio-cni"]);
    still_captured(&cluster, &reached, &back, 2 * N);
    eprintln!("cluster: migrated to redirect and rolled back to istio-cni on node {node}");
}
