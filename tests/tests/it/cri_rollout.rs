//! A DaemonSet rollout on a node of containerd (`redirect_tests::mesh`): from this build's
//! image to the next layout's (`cargo xtask test` builds it: this build with the next layout's
//! programs, one map wider), as the DaemonSet controller rolls a node (the old pod removed, the
//! new one created), while meshed pods' apps connect in a loop. The capture stays pinned while
//! no daemon runs; the new daemon upgrades the pinned datapath in place, re-applies every
//! enrollment and serves new pods; every connection of every pod went through its proxy. The
//! same in the per-pod attach scope (issue 48), where each pod cgroup's links get the new
//! programs.
use std::{collections::BTreeSet, path::PathBuf, time::Duration};

use redirect_kubelet::{kubelet::RunningPod, pod::cgroup_parent};
use redirect_testkit::{cgroup2_root, eventually, runs_or_skip, unique_name};
use redirect_tests::{
    attached_program_ids,
    mesh::{parts_or_skip, MeshNode},
};
use serde_json::Value;

/// The next layout's image tag and archive, or `None` after saying why.
fn next_image(test: &str) -> Option<(String, PathBuf)> {
    match (
        std::env::var("REDIRECT_NEXT_IMAGE"),
        std::env::var_os("REDIRECT_NEXT_IMAGE_ARCHIVE"),
    ) {
        (Ok(tag), Some(archive)) if std::path::Path::new(&archive).is_file() => {
            Some((tag, archive.into()))
        }
        _ => {
            runs_or_skip(
                test,
                Some("REDIRECT_NEXT_IMAGE/REDIRECT_NEXT_IMAGE_ARCHIVE are not set: run it with `cargo xtask test`".into()),
            );
            None
        }
    }
}

/// The ids of the programs the datapath has pinned (`redirect status --json`).
fn pinned_programs(mesh: &MeshNode) -> BTreeSet<u64> {
    let (code, out, err) = mesh
        .kubelet()
        .exec(mesh.ds(), "redirect", &["redirect", "status", "--json"])
        .expect("redirect status");
    assert_eq!(code, 0, "redirect status: {err}");
    let s: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    s["node"]["programs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["id"].as_u64())
        .collect()
}

/// The programs attached at `pod`'s own cgroup.
fn at_pod_cgroup(mesh: &MeshNode, pod: &RunningPod) -> BTreeSet<u64> {
    let dir = cgroup2_root().expect("cgroup2").join(
        cgroup_parent(&pod.pod, &mesh.node.info)
            .expect("its cgroup")
            .trim_start_matches('/'),
    );
    attached_program_ids(&dir).into_iter().collect()
}

#[test]
fn a_rollout_to_the_next_layout_keeps_every_pod_captured_and_enrolled() {
    roll_out(redirect_testkit::test_path!(), &[]);
}

#[test]
fn a_rollout_in_the_per_pod_scope_swaps_every_pod_cgroups_programs() {
    roll_out(
        redirect_testkit::test_path!(),
        &["--attach-scope", "per-pod"],
    );
}

/// The rollout with `extra` daemon arguments on both sides.
fn roll_out(test: &str, extra: &[&str]) {
    let Some((image, archive)) = parts_or_skip(test) else {
        return;
    };
    let Some((next, next_archive)) = next_image(test) else {
        return;
    };
    let per_pod = extra.contains(&"per-pod");
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.node
        .import(&next_archive)
        .expect("import the next layout's image");
    mesh.start_daemonset_with(None, extra);
    let names: Vec<String> = (0..3).map(|_| unique_name("roll-")).collect();
    let pods: Vec<_> = names
        .iter()
        .map(|n| {
            mesh.run_meshed(n, "0.2")
                .unwrap_or_else(|e| panic!("{n}: {e}"))
        })
        .collect();
    eventually(
        "connections of every pod",
        Duration::from_secs(60),
        || match pods.iter().filter(|p| mesh.proxied(p).len() < 3).count() {
            0 => Ok(()),
            n => Err(n),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let old_programs = pinned_programs(&mesh);
    if per_pod {
        for pod in &pods {
            let at = at_pod_cgroup(&mesh, pod);
            assert!(
                at.len() >= 10 && at.is_subset(&old_programs),
                "{}: its cgroup runs {at:?}, the datapath pinned {old_programs:?}",
                pod.sandbox
            );
        }
    }

    // The rollout: the old pod goes (SIGTERM; install-cni keeps the plugin), the new comes.
    // The kubelet's graceful stop: SIGTERM, up to 10 s, then the sandbox goes.
    mesh.stop_daemonset();
    let during: Vec<usize> = pods.iter().map(|p| mesh.proxied(p).len()).collect();
    eventually(
        "connections while no daemon runs",
        Duration::from_secs(30),
        || {
            let now: Vec<usize> = pods.iter().map(|p| mesh.proxied(p).len()).collect();
            if now.iter().zip(&during).all(|(n, d)| n > d) {
                Ok(())
            } else {
                Err(now)
            }
        },
    )
    .unwrap_or_else(|e| panic!("capture must go on without a daemon: {e}"));
    mesh.start_daemonset_with(Some(&next), extra);
    let logs = mesh.kubelet().logs(mesh.ds(), "redirect");
    assert!(
        logs.contains("node datapath upgraded in place"),
        "the next layout's daemon did not upgrade: {logs}"
    );
    if per_pod {
        // Every pod cgroup runs the next layout's programs only, the ones now pinned for the
        // next pod's links.
        let new_programs = pinned_programs(&mesh);
        assert!(new_programs.is_disjoint(&old_programs), "{new_programs:?}");
        for pod in &pods {
            let at = at_pod_cgroup(&mesh, pod);
            assert!(
                at.len() >= 10 && at.is_subset(&new_programs),
                "{}: its cgroup runs {at:?} after the rollout, the datapath pinned {new_programs:?}",
                pod.sandbox
            );
        }
    }

    // Every enrollment kept, new pods served.
    let list = mesh.listed();
    for pod in &pods {
        assert!(
            list.iter()
                .any(|e| e["pod"]["container_id"] == pod.sandbox.as_str()),
            "{} lost its enrollment in the rollout: {list:?}",
            pod.sandbox
        );
    }
    let late = mesh
        .run_meshed(&unique_name("after-"), "0.2")
        .expect("a pod after the rollout");
    assert_eq!(mesh.listed().len(), 4);
    eventually("the new pod's connections", Duration::from_secs(60), || {
        (!mesh.proxied(&late).is_empty()).then_some(()).ok_or(())
    })
    .unwrap_or_else(|e| panic!("the pod started after the rollout is not proxied: {e}"));
    for pod in pods.iter().chain([&late]) {
        mesh.assert_all_proxied(pod);
    }
}
