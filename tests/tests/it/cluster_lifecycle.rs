//! The lives of pods and of the daemon, driven by Kubernetes on a real cluster
//! (`redirect_tests::cluster`), each under the pods' client loops: every connection that
//! reached the world went through its pod's proxy (0 escapes).
//! - pods: `kubectl delete pod` (CNI DEL: the enrollment gone), a container killed and
//!   restarted by the kubelet (the app's, then the proxy's), `kubectl rollout restart`,
//!   `kubectl drain` and `uncordon`;
//! - the daemon: `kubectl set image` of the DaemonSet to the next layout's image (a rollout:
//!   enrollments kept), `kubectl delete pod` of the daemon's pod, a node reboot (kubelet,
//!   containerd and every container killed, `/run` and the bpffs gone, all booted again: the
//!   meshed pod comes back captured), `kubectl delete daemonset` (our entry and plugin removed
//!   from the node, as deploy/README.md says).
use std::time::Duration;

use redirect_testkit::{eventually, runs_or_skip};
use redirect_tests::cluster::{installed, ops::name_of, workloads::Injected, Cluster};
use serde_json::Value;

fn ip_of(pod: &Value) -> String {
    pod["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Whether `redirect list` names an enrollment holding `ip`.
fn listed(cluster: &Cluster, ip: &str) -> bool {
    cluster.listed().expect("redirect list").iter().any(|e| {
        e["addrs"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == ip))
    })
}

fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    cluster
        .kubectl
        .run(args)
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Kills `container` of `pod` and waits until the kubelet has restarted it and the pod is
/// Ready again.
fn kill_and_wait_restart(cluster: &Cluster, pod: &str, container: &str) {
    let before = cluster.restarts(pod, container);
    cluster.kill_container(pod, container).expect("kill");
    eventually(
        format!("{pod}/{container} restarted"),
        Duration::from_secs(120),
        || {
            let object = cluster
                .kubectl
                .get(&["pod", "-n", "shop", pod])
                .map_err(|e| e.to_string())?;
            let again = cluster.restarts(pod, container) > before;
            (again && redirect_tests::cluster::ops::is_ready(&object))
                .then_some(())
                .ok_or_else(|| format!("{}", object["status"]["containerStatuses"]))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_pods_life_driven_by_kubernetes_keeps_every_connection_captured() {
    let Some((parts, cluster, reached)) = installed(redirect_testkit::test_path!()) else {
        return;
    };
    let w = Injected::new("hello", 2, &parts.image, 3);
    let pods = cluster.deploy(&w).expect("the injected Deployment");
    for pod in &pods {
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }

    // kubectl delete pod: the CNI DEL removes its enrollment; its replacement is captured.
    let (victim, victim_ip) = (name_of(&pods[0]), ip_of(&pods[0]));
    assert!(listed(&cluster, &victim_ip), "{victim} enrolled");
    kubectl(
        &cluster,
        &["delete", "pod", "-n", "shop", &victim, "--wait=true"],
    );
    eventually(
        "the deleted pod's enrollment to go",
        Duration::from_secs(60),
        || {
            (!listed(&cluster, &victim_ip))
                .then_some(())
                .ok_or_else(|| "still listed".to_owned())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let pods = cluster.ready_pods("hello", 2).expect("the replacement");
    let kept = pods.first().map(name_of);
    for pod in pods.iter().filter(|p| name_of(p) != victim) {
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }

    // A container killed and restarted by the kubelet: the app (its new connections through
    // the same proxy), then the proxy (the app's next connections through the new one).
    let p = kept.expect("a pod");
    kill_and_wait_restart(&cluster, &p, "hello");
    cluster.assert_proxied(&reached, &p, 6);
    kill_and_wait_restart(&cluster, &p, "istio-proxy");
    kill_and_wait_restart(&cluster, &p, "hello");
    cluster.assert_proxied(&reached, &p, 9);

    // kubectl rollout restart: every new pod captured from its first connection.
    kubectl(
        &cluster,
        &["rollout", "restart", "deployment/hello", "-n", "shop"],
    );
    kubectl(
        &cluster,
        &[
            "rollout",
            "status",
            "deployment/hello",
            "-n",
            "shop",
            "--timeout=240s",
        ],
    );
    let before: Vec<String> = pods.iter().map(name_of).collect();
    let pods = cluster
        .ready_pods("hello", 2)
        .expect("the restarted Deployment");
    for pod in &pods {
        assert!(!before.contains(&name_of(pod)), "rolled: {}", name_of(pod));
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }

    // kubectl drain: the pods evicted, their enrollments gone; uncordon: captured again.
    let node = cluster.node.name.clone();
    kubectl(
        &cluster,
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=180s",
        ],
    );
    for pod in &pods {
        let ip = ip_of(pod);
        eventually(
            "a drained pod's enrollment to go",
            Duration::from_secs(60),
            || {
                (!listed(&cluster, &ip))
                    .then_some(())
                    .ok_or_else(|| "still listed".to_owned())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    kubectl(&cluster, &["uncordon", &node]);
    for pod in &cluster
        .ready_pods("hello", 2)
        .expect("the pods after uncordon")
    {
        cluster.assert_proxied(&reached, &name_of(pod), 3);
    }
}

#[test]
fn the_daemons_life_driven_by_kubernetes_keeps_every_pod_captured() {
    let test = redirect_testkit::test_path!();
    let next = match (
        std::env::var("REDIRECT_NEXT_IMAGE"),
        std::env::var_os("REDIRECT_NEXT_IMAGE_ARCHIVE"),
    ) {
        (Ok(tag), Some(archive)) => (tag, std::path::PathBuf::from(archive)),
        _ => {
            runs_or_skip(
                test,
                Some(
                    "REDIRECT_NEXT_IMAGE(_ARCHIVE) are not set: run it with `cargo xtask test`"
                        .into(),
                ),
            );
            return;
        }
    };
    let Some((parts, mut cluster, reached)) = installed(test) else {
        return;
    };
    cluster
        .node
        .import(&next.1)
        .expect("import the next layout's image");
    // 40 connections, one a second: the rollout and the daemon's deletion happen meanwhile.
    let w = Injected::new("hello", 1, &parts.image, 40);
    let pod = cluster
        .deploy(&w)
        .expect("the injected Deployment")
        .remove(0);
    let (name, ip) = (name_of(&pod), ip_of(&pod));

    // The DaemonSet rolled to the next layout's image: the enrollment kept.
    let images = format!("redirect={0} install-cni={0}", next.0);
    let mut args = vec!["set", "image", "daemonset/redirect", "-n", "istio-system"];
    args.extend(images.split(' '));
    kubectl(&cluster, &args);
    kubectl(
        &cluster,
        &[
            "rollout",
            "status",
            "daemonset/redirect",
            "-n",
            "istio-system",
            "--timeout=180s",
        ],
    );
    let ds = cluster.daemon_pod_ready().expect("the rolled daemon");
    assert_eq!(ds["spec"]["containers"][0]["image"], next.0.as_str());
    assert!(
        listed(&cluster, &ip),
        "{name} still enrolled after the rollout"
    );

    // kubectl delete pod of the daemon's pod: the DaemonSet makes another; nothing changes.
    kubectl(
        &cluster,
        &[
            "delete",
            "pod",
            "-n",
            "istio-system",
            &name_of(&ds),
            "--wait=true",
        ],
    );
    let again = cluster.daemon_pod_ready().expect("the daemon's next pod");
    assert_ne!(name_of(&again), name_of(&ds));
    assert!(
        listed(&cluster, &ip),
        "{name} still enrolled after the daemon's pod was deleted"
    );
    cluster.assert_proxied(&reached, &name, 40);

    // A node reboot: the pod's sandbox comes back only once the daemon serves its ADD. The
    // pods' statuses still say Ready from before: wait for the kubelet's restarts.
    let daemon = name_of(&again);
    let before = (
        cluster.restarts_in("istio-system", &daemon, "redirect"),
        cluster.restarts(&name, "hello"),
    );
    cluster.reboot().expect("the reboot");
    eventually(
        "the node's pods started again",
        Duration::from_secs(240),
        || {
            let now = (
                cluster.restarts_in("istio-system", &daemon, "redirect"),
                cluster.restarts(&name, "hello"),
            );
            (now.0 > before.0 && now.1 > before.1)
                .then_some(())
                .ok_or_else(|| format!("restarts {before:?} -> {now:?}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster.describe("shop")));
    cluster
        .daemon_pod_ready()
        .expect("the daemon after the reboot");
    let pod = cluster
        .ready_pods("hello", 1)
        .expect("the pod after the reboot")
        .remove(0);
    assert_eq!(name_of(&pod), name);
    assert!(
        listed(&cluster, &ip_of(&pod)),
        "{name} enrolled after the reboot"
    );
    cluster.assert_proxied(&reached, &name, 80);

    // The same workload started with our entry in the chain, then (below) without it, for
    // the closing figures (no istio-validation: without capture it cannot pass).
    let mut timed = Injected::new("timed-a", 3, &parts.image, 0);
    timed.no_validation = true;
    let with = cluster.time_to_ready(&timed).expect("timed with our entry");

    // kubectl delete daemonset: our entry and plugin leave the node.
    kubectl(
        &cluster,
        &[
            "delete",
            "daemonset",
            "redirect",
            "-n",
            "istio-system",
            "--wait=true",
        ],
    );
    eventually(
        "the entry and the plugin to leave the node",
        Duration::from_secs(120),
        || {
            let conflist =
                std::fs::read_to_string(cluster.node.cni_conf_dir().join("10-podnet.conflist"))
                    .unwrap_or_default();
            let plugin = cluster.node.cni_bin_dir().join("redirect-cni").exists();
            (!conflist.contains("redirect-cni") && !plugin)
                .then_some(())
                .ok_or_else(|| format!("plugin {plugin}, conflist {conflist}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    timed.name = "timed-b".into();
    let without = cluster
        .time_to_ready(&timed)
        .expect("timed without our entry");
    eprintln!(
        "cluster: apply to Ready with our entry {with:?} (median {:?}), without {without:?} (median {:?})",
        with[with.len() / 2],
        without[without.len() / 2]
    );
}
