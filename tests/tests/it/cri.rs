//! A node as a kubelet runs it (`redirect_tests::mesh`): Debian's containerd (its CRI, runc,
//! Debian's bridge + host-local as the primary network) in a node of the test's own (a network
//! namespace for its host network, a mount namespace with a fresh `/run` and bpffs), driven by
//! the kubelet-lite (`redirect-kubelet`) as the kubelet drives it. The DaemonSet's pod runs from
//! the image `cargo xtask image` built, its containers, privileges, mounts, environment and
//! arguments read from `deploy/kubernetes/daemonset.yaml`; its install-cni container puts our
//! entry into the primary conflist. containerd chooses the namespace paths
//! (`/var/run/netns/cni-...`), the CNI_ARGS and the timing of every ADD and DEL. The apiserver is
//! the recorded-object server in the node's network (a real kube-apiserver and kubelet 1.20:
//! `cluster_*.rs`).
//! What the test adds to the DaemonSet's arguments only makes the test's node a node: its
//! cgroup in place of the machine's root (`--cgroup`, `--proxy-cgroup`, `--pod-cgroup-root`),
//! the recorded server's kubeconfig in place of in-cluster credentials, and short pod-GET
//! retries. The cluster DNS address is the daemon's to find: the recorded server serves the
//! kube-dns Service, and the meshed pods capture DNS with `dnsPolicy: ClusterFirst`.
use std::{path::Path, time::Duration};

use redirect_testkit::{eventually, unique_name};
use redirect_tests::mesh::{parts_or_skip, MeshNode, CLUSTER_DNS, GATEWAY, WORLD_PORT};
use serde_json::Value;

#[test]
fn a_pod_containerd_starts_is_captured_by_the_daemonset_run_from_its_image() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let ds = mesh.ds();
    assert_eq!(
        ds.containers
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
        ["redirect", "install-cni"]
    );
    // Not privileged (issue 31, finding 12): the daemon holds the DaemonSet's capabilities
    // and no others.
    // Polled: the readiness probe can pass before the line is printed, and containerd's shim
    // writes the container's log on its own time.
    let pid: u32 = eventually(
        "a ready line in the daemon's log",
        Duration::from_secs(30),
        || {
            let log = mesh.kubelet().logs(ds, "redirect");
            log.split("ready pid=")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("no ready line yet: {log}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .expect("CapEff");
    // CAP_NET_ADMIN 12, CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39.
    let wanted: u64 = [12, 19, 21, 38, 39].iter().map(|b| 1u64 << b).sum();
    assert_eq!(eff, wanted, "the daemon's effective capabilities: {eff:#x}");
    let conflist = std::fs::read_to_string(mesh.node.cni_conf_dir().join("10-podnet.conflist"))
        .expect("conflist");
    assert!(conflist.contains("redirect-cni"), "no entry in: {conflist}");
    assert!(
        mesh.node.cni_bin_dir().join("redirect-cni").exists(),
        "no plugin copied"
    );

    let name = unique_name("hello-");
    let meshed = mesh
        .run_meshed(&name, "0.1")
        .unwrap_or_else(|e| panic!("the meshed pod: {e}"));
    let netns = meshed.netns.clone().expect("a pod network namespace");
    assert!(
        netns.starts_with("/var/run/netns"),
        "containerd 1.6 names /var/run/netns/cni-...: {}",
        netns.display()
    );
    // Enrolled before its containers started: ADD returned only once the daemon had it; the
    // daemon (its image has no /var) lists the path where it sees the namespace.
    let list = mesh.listed();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["pod"]["name"], name.as_str(), "{list:?}");
    assert_eq!(
        list[0]["pod"]["container_id"],
        meshed.sandbox.as_str(),
        "{list:?}"
    );
    let seen_at = Path::new("/run/netns").join(netns.file_name().expect("a file name"));
    assert_eq!(list[0]["netns"], seen_at.display().to_string(), "{list:?}");
    // What an operator sees (docs/kubernetes.md, "On a node: from containerd's RunPodSandbox to redirect list", shows this output).
    let (_, text, _) = mesh
        .kubelet()
        .exec(mesh.ds(), "redirect", &["redirect", "list"])
        .expect("redirect list");
    eprintln!(
        "redirect list after RunPodSandbox {}:\n{text}",
        meshed.sandbox
    );
    // Its DNS goes to the proxy: the cluster DNS the daemon read from the kube-dns Service.
    assert_eq!(
        list[0]["policy"]["dns_servers"],
        serde_json::json!([CLUSTER_DNS]),
        "{list:?}"
    );
    mesh.wait_proxied(&meshed, 10);
    for r in mesh.proxied(&meshed) {
        assert_eq!(r["orig_dst"], format!("{GATEWAY}:{WORLD_PORT}"), "{r}");
        assert_eq!(r["cluster"], "PassthroughCluster", "{r}");
    }
    assert!(mesh.assert_all_proxied(&meshed) >= 10);

    // The kubelet removes the pod: containerd runs DEL (twice); the enrollment goes.
    mesh.kubelet()
        .remove(&meshed)
        .expect("remove the meshed pod");
    assert_eq!(mesh.listed(), Vec::<Value>::new(), "after RemovePodSandbox");
}

#[test]
fn after_a_reboot_pods_fail_closed_until_the_daemon_answers_then_start_captured() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let name = unique_name("hello-");
    let before = mesh.run_meshed(&name, "0.1").expect("the meshed pod");
    eventually(
        "a connection through the proxy",
        Duration::from_secs(60),
        || (!mesh.proxied(&before).is_empty()).then_some(()).ok_or(()),
    )
    .expect("captured before the reboot");

    // The power goes; at boot the kubelet starts the pods again before the daemon's pod is
    // back: the plugin and our entry are on the node (its /opt and /etc), the daemon is not.
    mesh.reboot();
    let refused = mesh
        .run_meshed(&name, "0.1")
        .expect_err("ADD must fail closed");
    let text = refused.to_string();
    assert!(
        text.contains("RunPodSandbox") && text.contains("redirect"),
        "RunPodSandbox must fail with the plugin's error: {text}"
    );
    for id in mesh.node.cri().list_pod_sandboxes().expect("list") {
        assert!(
            !mesh.node.cri().sandbox_ready(&id).expect("status"),
            "a sandbox runs without capture: {id}"
        );
    }

    // The DaemonSet's pod comes back; the kubelet's retry then starts the pod captured.
    mesh.start_daemonset();
    let after = eventually("the meshed pod to start", Duration::from_secs(60), || {
        mesh.run_meshed(&name, "0.1").map_err(|e| e.to_string())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let list = mesh.listed();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["pod"]["container_id"], after.sandbox.as_str());
    // Both lives of the pod: every connection that reached the world was proxied.
    mesh.assert_all_proxied(&after);
}

#[test]
fn the_daemon_killed_while_twenty_sandboxes_start_leaves_none_uncaptured() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let names: Vec<String> = (0..20).map(|_| unique_name("boot-")).collect();
    let (daemon_id, mut failed, mut pods) =
        (mesh.ds().container("redirect").to_owned(), 0, Vec::new());
    std::thread::scope(|s| {
        let starts: Vec<_> = names
            .iter()
            .map(|n| {
                let mesh = &mesh;
                s.spawn(move || mesh.run_meshed(n, "1"))
            })
            .collect();
        // SIGKILL the daemon while the sandboxes are being created.
        let (_, pid) = mesh
            .node
            .cri()
            .container_state(&daemon_id)
            .expect("daemon state");
        assert!(pid > 0, "the daemon runs");
        // Once it has read a few of their pods from the apiserver: ADDs in its hands.
        eventually(
            "the daemon to read the first pods",
            Duration::from_secs(60),
            || {
                let read = mesh
                    .api
                    .hits()
                    .iter()
                    .filter(|h| h.contains("/pods/boot-"))
                    .count();
                if read >= 3 {
                    Ok(())
                } else {
                    Err(read)
                }
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).expect("SIGKILL the daemon");
        for (name, start) in names.iter().zip(starts) {
            match start.join().expect("a start thread") {
                Ok(pod) => pods.push(pod),
                Err(e) => {
                    failed += 1;
                    eprintln!("{name}: {e}");
                }
            }
        }
    });
    // The kubelet restarts the daemon's container; then it retries every sandbox that failed.
    let mut ds = mesh.ds.take().expect("the DaemonSet's pod");
    eventually(
        "the daemon to have exited",
        Duration::from_secs(10),
        || match mesh.node.cri().container_state(&daemon_id) {
            Ok((false, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    mesh.kubelet()
        .restart(&mut ds, "redirect")
        .expect("restart the daemon");
    mesh.ds = Some(ds);
    mesh.wait_daemonset_ready();
    let started: Vec<String> = pods
        .iter()
        .filter_map(|p| p.pod.metadata.name.clone())
        .collect();
    for name in names.iter().filter(|n| !started.contains(n)) {
        let pod = eventually("a failed sandbox's retry", Duration::from_secs(60), || {
            mesh.run_meshed(name, "1").map_err(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        pods.push(pod);
    }
    eprintln!("{failed} of 20 sandboxes failed while the daemon was down and were retried");
    let list = mesh.listed();
    assert_eq!(list.len(), 20, "every pod enrolled: {list:?}");
    for pod in &pods {
        assert!(
            list.iter()
                .any(|e| e["pod"]["container_id"] == pod.sandbox.as_str()),
            "{} is not enrolled: {list:?}",
            pod.sandbox
        );
    }
    eventually(
        "a connection of every pod",
        Duration::from_secs(60),
        || match pods.iter().filter(|p| mesh.proxied(p).is_empty()).count() {
            0 => Ok(()),
            quiet => Err(quiet),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for pod in &pods {
        mesh.assert_all_proxied(pod);
    }
}
