//! A DaemonSet rollout on a node of containerd (`redirect_tests::mesh`): from this build's
//! image to the next layout's (`cargo xtask test` builds it: this build with the next layout's
//! programs, one map wider), as the DaemonSet controller rolls a node (the old pod removed, the
//! new one created), while meshed pods' apps connect in a loop. The capture stays pinned while
//! no daemon runs; the new daemon upgrades the pinned datapath in place, re-applies every
//! enrollment and serves new pods; every connection of every pod went through its proxy.
use std::{path::PathBuf, time::Duration};

use redirect_testkit::{eventually, runs_or_skip, unique_name};
use redirect_tests::mesh::{parts_or_skip, MeshNode};

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

#[test]
fn a_rollout_to_the_next_layout_keeps_every_pod_captured_and_enrolled() {
    let test = redirect_testkit::test_path!();
    let Some((image, archive)) = parts_or_skip(test) else {
        return;
    };
    let Some((next, next_archive)) = next_image(test) else {
        return;
    };
    let mut mesh = MeshNode::new(&image, &archive);
    mesh.node
        .import(&next_archive)
        .expect("import the next layout's image");
    mesh.start_daemonset();
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

    // The rollout: the old pod goes (SIGTERM; install-cni keeps the plugin), the new comes.
    // The kubelet's graceful stop: SIGTERM, up to 10 s, then the sandbox goes.
    let old = mesh.ds.take().expect("the DaemonSet's pod");
    for (_, id) in &old.containers {
        mesh.node
            .cri()
            .stop_container(id, 10)
            .expect("stop a DaemonSet container");
    }
    mesh.kubelet()
        .remove(&old)
        .expect("remove the old DaemonSet pod");
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
    mesh.start_daemonset_from(Some(&next));
    let logs = mesh.kubelet().logs(mesh.ds(), "redirect");
    assert!(
        logs.contains("node datapath upgraded in place"),
        "the next layout's daemon did not upgrade: {logs}"
    );

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
