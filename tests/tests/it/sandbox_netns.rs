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

/// A container directory of the pod whose name comes first in the pod directory's listing
/// (the order in which the reconcile met the pod's processes), with its runtime id.
fn first_listed(pod: &Cgroup) -> (String, Cgroup) {
    for salt in 100..400 {
        let id = runtime_id(salt);
        let cg = pod
            .child(&format!("cri-containerd-{id}.scope"))
            .expect("cgroup");
        let first = std::fs::read_dir(pod.path())
            .expect("the pod's directory")
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path());
        if first.as_deref() == Some(cg.path()) {
            return (id, cg);
        }
    }
    panic!("no container directory name came first in 300 tries");
}

#[test]
fn an_app_processs_own_namespace_holding_the_pod_address_is_never_enrolled() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let m = Meshed::new(&host);
    let (node, pod) = (&m.node, &m.pod);
    // The decoy: a namespace of the app's own (no runtime names it), made by a process of the
    // app's container, with the pod's address.
    let (evil, evil_cg) = first_listed(&m.cgroups.pod);
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
