//! In-place enrollment trusts only the sandbox's namespace (issue 31, finding 2): an app
//! container's process that makes a network namespace of its own and puts the pod's address
//! in it (an app with a user namespace can) must not be enrolled instead of the pod. The
//! decoy's container directory is made to come first in the pod directory's listing, where
//! the old reconcile, taking the first namespace of any of the pod's processes that holds the
//! pod's addresses, took it; the reconcile now takes a namespace its runtime named (under
//! `/run/netns`), else one of the sandbox's processes (the container its status does not name),
//! and enrolls the pod's own namespace.
use std::{process::Command, time::Duration};

use redirect_testkit::{privileged, Cgroup, Child};
use redirect_tests::cni::{CniHost, GATEWAY};
use serde_json::json;

use crate::reconcile::{lands, runtime_id, wait_for, Meshed};

/// Four runtime ids, the first of which a cgroup directory listing shows before the others:
/// the decoy's, then the sandbox's, the proxy's and the app's. kernfs lists a directory in the
/// order of its entries' name hashes, which depend on the name alone, so the order met in a
/// scratch directory is the order the pod's directory will show (whatever names come out).
fn decoy_listed_first() -> (String, [String; 3]) {
    let scratch = Cgroup::new("rsbx").expect("a scratch cgroup");
    let ids: Vec<String> = (100..104).map(runtime_id).collect();
    let dirs: Vec<Cgroup> = ids
        .iter()
        .map(|id| scratch.child(&container_dir(id)).expect("cgroup"))
        .collect();
    let first = std::fs::read_dir(scratch.path())
        .expect("the scratch directory")
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name())
        .expect("four directories listed");
    drop(dirs);
    let (decoy, rest): (Vec<String>, Vec<String>) = ids
        .into_iter()
        .partition(|id| std::ffi::OsStr::new(&container_dir(id)) == first);
    let rest: [String; 3] = rest.try_into().expect("three others");
    (decoy.into_iter().next().expect("the first listed"), rest)
}

fn container_dir(id: &str) -> String {
    format!("cri-containerd-{id}.scope")
}

#[test]
fn an_app_processs_own_namespace_holding_the_pod_address_is_never_enrolled() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let (evil, ids) = decoy_listed_first();
    let m = Meshed::with_ids(&host, ids);
    let (node, pod) = (&m.node, &m.pod);
    // The decoy: a namespace of the app's own (no runtime names it), made by a process of the
    // app's container, with the pod's address.
    let evil_cg = m
        .cgroups
        .pod
        .child(&container_dir(&evil))
        .expect("the decoy's container directory");
    let first = std::fs::read_dir(m.cgroups.pod.path())
        .expect("the pod's directory")
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path());
    assert_eq!(first.as_deref(), Some(evil_cg.path()), "listed first");
    let script = format!(
        "ip link add d0 type veth peer name d1 && ip addr add {}/32 dev d0 && ip link set d0 up && echo ready && exec sleep 600",
        pod.ip()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "sh", "-c", &script]);
    let mut decoy = Child::spawn("decoy", cmd).expect("the decoy");
    std::fs::write(evil_cg.path().join("cgroup.procs"), decoy.pid().to_string())
        .expect("the decoy into the app's container");
    decoy
        .wait_line("the decoy's namespace", Duration::from_secs(10), |l| {
            l == "ready"
        })
        .expect("ready");
    // The apiserver names that container (it is one of the pod's).
    m.report_edited(true, |pod| {
        pod["status"]["containerStatuses"]
            .as_array_mut()
            .expect("statuses")
            .push(json!({
                "name": "evil", "image": "evil", "imageID": "", "ready": true,
                "restartCount": 0, "containerID": format!("containerd://{evil}"),
                "state": {"running": {"startedAt": "2026-12-01T00:00:02Z"}}
            }));
    });

    let _daemon = m.daemon(&[]);
    let list = wait_for("the pod enrolled in place", node, |l| l.len() == 1);
    assert_eq!(
        list[0]["netns"],
        pod.netns.path().display().to_string(),
        "not the sandbox's namespace: {list:?}"
    );
    assert_eq!(list[0]["pod"]["container_id"], m.ids[0], "{list:?}");
    assert_eq!(
        lands(&pod.netns, &m.cgroups.app, 1000),
        format!("at=proxy/[::]:15001 orig={GATEWAY}:80")
    );
}
