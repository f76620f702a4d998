//! Switching a node datapath's attach scope in place (issue 48), in-process against real
//! cgroups: from the root scope every given pod cgroup is linked before the node's links go,
//! and back the node's cgroup is linked before the pods' go; each direction is refused from
//! the wrong scope; a switch cut short between its two steps (both scopes' links pinned) is
//! finished towards the scope the next start asks for. The daemon's side, under live pods:
//! `cri_scope_switch.rs`.
use redirect_datapath::{AttachScope, NodeAttach, NodeDatapath};
use redirect_testkit::{privileged, Cgroup};
use redirect_tests::{attached_program_ids, node::Pins};

#[test]
fn the_scope_switches_both_ways_and_a_cut_short_switch_is_finished() {
    privileged!();
    let pins = Pins::new();
    let node = Cgroup::new("rss").expect("node cgroup");
    let attach = NodeAttach {
        cgroup: Some(node.path().to_path_buf()),
        proxy_cgroup: Some(node.path().to_path_buf()),
        quotas: Default::default(),
        scope: AttachScope::Root,
    };
    let dp = NodeDatapath::open_or_create(&pins.0, &attach)
        .expect("create the root datapath")
        .datapath;
    let pods = [
        node.child("poduid-a").expect("pod a"),
        node.child("poduid-b").expect("pod b"),
    ];
    let at_node = attached_program_ids(node.path());
    assert!(at_node.len() >= 10, "{at_node:?}");
    dp.switch_to_root().expect_err("already root");

    let dirs: Vec<&std::path::Path> = pods.iter().map(|p| p.path()).collect();
    assert_eq!(dp.switch_to_per_pod(&dirs).expect("to per-pod"), 2);
    assert_eq!(dp.scope(), AttachScope::PerPod);
    assert_eq!(dp.pod_cgroups().len(), 2);
    assert!(!pins.0.join("links").exists());
    redirect_tests::wait_detached(node.path());
    for pod in &pods {
        let progs = attached_program_ids(pod.path());
        assert!(
            !progs.is_empty() && progs.iter().all(|p| at_node.contains(p)),
            "the pod runs the programs the node ran: {progs:?} / {at_node:?}"
        );
    }
    dp.switch_to_per_pod(&dirs).expect_err("already per-pod");

    // Cut short after the rename: both scopes pinned; the next start asks for per-pod.
    std::fs::create_dir(pins.0.join("links")).expect("a leftover links/");
    std::fs::create_dir(pins.0.join("links-next")).expect("a leftover staging directory");
    assert!(NodeDatapath::finish_switch(&pins.0, AttachScope::PerPod).expect("finish"));
    assert!(!pins.0.join("links").exists() && !pins.0.join("links-next").exists());
    assert_eq!(dp.pod_cgroups().len(), 2, "the pods' links are kept");
    assert!(!NodeDatapath::finish_switch(&pins.0, AttachScope::PerPod).expect("nothing left"));

    assert_eq!(dp.switch_to_root().expect("back to root"), at_node.len());
    assert_eq!(dp.scope(), AttachScope::Root);
    assert_eq!(attached_program_ids(node.path()).len(), at_node.len());
    for pod in &pods {
        redirect_tests::wait_detached(pod.path());
    }
    drop(dp);
    drop(pins);
    redirect_tests::wait_detached(node.path());
}
