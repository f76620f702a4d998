//! The per-pod attach scope's pins (issue 48), in-process against real cgroups: a datapath
//! created with it links nothing at its own cgroup; a pod cgroup is linked once (12 links,
//! pinned under `cgroups/ID`) however often its ADD comes; unlinking unpins them; a pod cgroup
//! removed behind the datapath's back is found by its links (the kernel detaches them) and
//! swept; a target that is not a cgroup leaves nothing; writers of the root scope are refused.
use std::{path::Path, time::Duration};

use redirect_datapath::{AttachScope, NodeAttach, NodeDatapath};
use redirect_testkit::{eventually, privileged, Cgroup};
use redirect_tests::node::Pins;

fn pinned(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

#[test]
fn a_pod_cgroup_is_linked_once_unlinked_and_swept_when_it_goes() {
    privileged!();
    let pins = Pins::new();
    let node = Cgroup::new("rpl").expect("node cgroup");
    let attach = NodeAttach {
        cgroup: Some(node.path().to_path_buf()),
        proxy_cgroup: Some(node.path().to_path_buf()),
        quotas: Default::default(),
        scope: AttachScope::PerPod,
    };
    let dp = NodeDatapath::open_or_create(&pins.0, &attach)
        .expect("create the per-pod datapath")
        .datapath;
    assert_eq!(dp.scope(), AttachScope::PerPod);
    assert!(!pins.0.join("links").exists(), "nothing linked at the node");
    assert_eq!(dp.pod_cgroups(), Vec::<u64>::new());

    let pod = node.child("poduid-a").expect("pod cgroup");
    let (id, phases) = dp.attach_pod_cgroup(pod.path()).expect("link the pod");
    assert_eq!(dp.pod_cgroups(), vec![id]);
    let links = pins.0.join("cgroups").join(id.to_string());
    assert_eq!(pinned(&links), 12, "{}", links.display());
    assert!(phases.to_string().contains("cgroup_links="), "{phases}");
    assert!(!dp.pod_cgroup_gone(id));
    // A retried ADD, a new sandbox of the same pod: the same links.
    let (again, _) = dp.attach_pod_cgroup(pod.path()).expect("link again");
    assert_eq!((again, pinned(&links)), (id, 12));

    dp.detach_pod_cgroup(id).expect("unlink");
    assert_eq!(dp.pod_cgroups(), Vec::<u64>::new());
    assert!(dp.pod_cgroup_gone(id), "no links: nothing captures there");

    // The kubelet removes the pod's cgroup first: the kernel detaches its links.
    let (id, _) = dp.attach_pod_cgroup(pod.path()).expect("link once more");
    drop(pod);
    eventually(
        "the kernel detaching the links of a removed cgroup",
        Duration::from_secs(10),
        || dp.pod_cgroup_gone(id).then_some(()).ok_or(id),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(dp.sweep_pod_cgroups(), vec![id]);
    assert_eq!(dp.pod_cgroups(), Vec::<u64>::new());

    // Not a cgroup: refused, nothing pinned.
    let err = dp
        .attach_pod_cgroup(Path::new("/tmp"))
        .expect_err("/tmp is no cgroup");
    assert_eq!(dp.pod_cgroups(), Vec::<u64>::new(), "{err}");

    // A writer of the root scope (istio-iptables, vm) is refused, naming the scope.
    let root = NodeAttach {
        scope: AttachScope::Root,
        ..attach
    };
    let err = dp.check_attach(&root).expect_err("a root-scope writer");
    assert!(err.to_string().contains("per-pod"), "{err}");
}
