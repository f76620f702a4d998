//! Which cgroup directories the reconcile believes (issue 31, finding 1): a pod's directory is
//! found by its uid, which anyone who can make a directory can write. A second directory
//! naming the same pod (a mirror elsewhere in the tree) is an alarm and neither is trusted; a
//! directory root does not own (a user's delegated subtree, `user@N.service`) is never read.
//! Once the mirror is the user's, the pod is enrolled in place through its sandbox and its
//! bypass bound to its own proxy container.
use std::time::Duration;

use redirect_testkit::{privileged, Cgroup};
use redirect_tests::cni::{CniHost, GATEWAY};
use serde_json::Value;

use crate::reconcile::{lands, listed, wait_for, Meshed};

/// `dir` and everything below it given to `uid` (as systemd delegates `user@N.service`).
fn chown_tree(dir: &std::path::Path, uid: u32) {
    let owner = Some(nix::unistd::Uid::from_raw(uid));
    nix::unistd::chown(dir, owner, None).expect("chown");
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            chown_tree(&entry.path(), uid);
        }
    }
}

#[test]
fn a_mirrored_pod_directory_is_an_alarm_and_a_users_mirror_is_never_read() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let m = Meshed::new(&host);
    let (node, pod, uid, proxy_cg) = (&m.node, &m.pod, &m.uid, m.proxy_cg());
    let proxy = &m.ids[1];
    // The mirror: the pod's directory and its proxy container's, named as the kubelet names
    // them (the ids are in every /proc/PID/cgroup), under a user's part of the tree.
    let user = node.cgroup.child("user.slice").expect("cgroup");
    let service = user.child("user@1000.service").expect("cgroup");
    let mirror_pod: Cgroup = service
        .child(&format!(
            "kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        ))
        .expect("cgroup");
    let _mirror_proxy = mirror_pod
        .child(&format!("cri-containerd-{proxy}.scope"))
        .expect("cgroup");
    m.report(true);

    // Both root's: two directories name the pod, neither is believed.
    let mut daemon = m.daemon(&[]);
    daemon
        .wait_stderr_line(
            "the alarm for the pod's two directories",
            Duration::from_secs(30),
            |l| {
                l.contains("ALARM: two cgroup directories name the same pod")
                    && l.contains(uid.as_str())
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    assert_eq!(
        listed(node),
        Vec::<Value>::new(),
        "enrolled through a mirrored directory"
    );

    // The mirror is the user's (as everything under user@1000.service is): never read; the pod
    // is enrolled through its sandbox, its bypass bound to its own proxy container.
    chown_tree(service.path(), 1000);
    let list = wait_for("the pod enrolled in place, bound to its proxy", node, |l| {
        l.len() == 1 && l[0]["policy"]["proxy_cgroup"] != Value::Null
    });
    assert_eq!(
        list[0]["policy"]["proxy_cgroup"],
        proxy_cg.path().display().to_string(),
        "{list:?}"
    );
    assert_eq!(list[0]["netns"], pod.netns.path().display().to_string());
    let direct = format!("at=world/{GATEWAY}:80 orig={GATEWAY}:80");
    assert_eq!(lands(&pod.netns, proxy_cg, 1337), direct, "the proxy");
    assert_eq!(
        lands(&pod.netns, &m.cgroups.app, 1000),
        format!("at=proxy/[::]:15001 orig={GATEWAY}:80"),
        "the app"
    );
}
