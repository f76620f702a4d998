//! Switching the attach scope in place (issue 48) on a node of containerd
//! (`redirect_tests::mesh`): the DaemonSet runs in the root scope under meshed pods that connect
//! in a loop, is rolled to `--attach-scope per-pod` and back, as an operator changes its
//! arguments. Each new daemon switches the pinned datapath before it re-applies the
//! enrollments: the pods' cgroups are linked and the node's links go (and back), every pod
//! stays enrolled, and every connection before, during and after went through its proxy.
use std::{collections::BTreeSet, time::Duration};

use redirect_kubelet::{kubelet::RunningPod, pod::cgroup_parent};
use redirect_testkit::{cgroup2_root, eventually, unique_name};
use redirect_tests::{
    attached_program_ids,
    mesh::{parts_or_skip, MeshNode},
};
use serde_json::Value;

fn status(mesh: &MeshNode) -> Value {
    let (code, out, err) = mesh
        .kubelet()
        .exec(mesh.ds(), "redirect", &["redirect", "status", "--json"])
        .expect("redirect status");
    assert_eq!(code, 0, "redirect status: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `pod`'s cgroup id and the programs attached there.
fn at_pod(mesh: &MeshNode, pod: &RunningPod) -> (u64, Vec<u64>) {
    let dir = cgroup2_root().expect("cgroup2").join(
        cgroup_parent(&pod.pod, &mesh.node.info)
            .expect("its cgroup")
            .trim_start_matches('/'),
    );
    let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dir).expect("its cgroup"));
    (id, attached_program_ids(&dir))
}

/// The daemon rolled to `extra`; each pod keeps connecting through its proxy meanwhile.
fn roll(mesh: &mut MeshNode, pods: &[RunningPod], extra: &[&str]) {
    let before: Vec<usize> = pods.iter().map(|p| mesh.proxied(p).len()).collect();
    mesh.stop_daemonset();
    mesh.start_daemonset_with(None, extra);
    let logs = mesh.kubelet().logs(mesh.ds(), "redirect");
    assert!(
        logs.contains("switched the attach scope in place"),
        "the daemon with {extra:?} did not switch: {logs}"
    );
    eventually(
        "connections after the switch",
        Duration::from_secs(60),
        || {
            let now: Vec<usize> = pods.iter().map(|p| mesh.proxied(p).len()).collect();
            if now.iter().zip(&before).all(|(n, b)| *n >= b + 3) {
                Ok(())
            } else {
                Err(now)
            }
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let list = mesh.listed();
    for pod in pods {
        assert!(
            list.iter()
                .any(|e| e["pod"]["container_id"] == pod.sandbox.as_str()),
            "{} lost its enrollment in the switch: {list:?}",
            pod.sandbox
        );
    }
}

#[test]
fn the_attach_scope_switches_in_place_both_ways_under_live_pods() {
    let Some((image, archive)) = parts_or_skip(redirect_testkit::test_path!()) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.start_daemonset();
    let pods: Vec<RunningPod> = (0..2)
        .map(|_| {
            let n = unique_name("switch-");
            mesh.run_meshed(&n, "0.1")
                .unwrap_or_else(|e| panic!("{n}: {e}"))
        })
        .collect();
    for pod in &pods {
        mesh.wait_proxied(pod, 3);
    }
    let s = status(&mesh);
    assert_eq!(s["node"]["scope"], "root", "{s}");
    let node_programs = attached_program_ids(mesh.node.cgroup.path());
    assert!(node_programs.len() >= 10, "linked at the node: {s}");

    // Root to per-pod: each pod's cgroup runs the programs, the node's cgroup none.
    roll(&mut mesh, &pods, &["--attach-scope", "per-pod"]);
    let s = status(&mesh);
    assert_eq!(s["node"]["scope"], "per-pod", "{s}");
    let linked: BTreeSet<u64> = s["node"]["pod_cgroups"]
        .as_array()
        .expect("pod_cgroups")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    for pod in &pods {
        let (id, progs) = at_pod(&mesh, pod);
        assert!(linked.contains(&id), "{} not linked: {s}", pod.sandbox);
        assert!(progs.len() >= 10, "{}: {progs:?}", pod.sandbox);
    }
    assert_eq!(
        attached_program_ids(mesh.node.cgroup.path()),
        Vec::<u64>::new(),
        "the node's links went: {s}"
    );
    let late = mesh
        .run_meshed(&unique_name("late-"), "0.1")
        .expect("a pod after the switch");
    mesh.wait_proxied(&late, 3);
    assert!(!at_pod(&mesh, &late).1.is_empty(), "the new pod is linked");

    // And back: the node's cgroup runs them again, no pod's cgroup does.
    let all: Vec<RunningPod> = pods.into_iter().chain([late]).collect();
    roll(&mut mesh, &all, &[]);
    let s = status(&mesh);
    assert_eq!(s["node"]["scope"], "root", "{s}");
    assert!(
        s["node"]["pod_cgroups"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "no pod cgroup linked: {s}"
    );
    assert!(
        attached_program_ids(mesh.node.cgroup.path()).len() >= 10,
        "{s}"
    );
    for pod in &all {
        assert_eq!(at_pod(&mesh, pod).1, Vec::<u64>::new(), "{}", pod.sandbox);
        assert!(mesh.assert_all_proxied(pod) >= 6, "{}", pod.sandbox);
    }
}
