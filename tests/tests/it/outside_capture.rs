//! Connections that predate capture (issue 31, finding 13): a pod enrolled in place keeps the
//! connections it opened before, outside the proxy (iptables has the same hole: conntrack keeps
//! established flows). The daemon counts them (`redirect list`: `outside_capture`) and, once
//! the pod asks (`redirect.dev/reset-uncaptured: "true"`), resets them: the application's
//! long-lived connection ends and its reconnect lands at the proxy with its original
//! destination. Real connections throughout: one held from the pod's app container to a
//! server at the gateway, a line every 100 ms.
use std::{process::Command, time::Duration};

use crate::reconcile::{wait_for, Meshed};
use redirect_testkit::{eventually, privileged, Child};
use redirect_tests::{
    cni::{CniHost, GATEWAY},
    env::bin_path,
};

const WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_connection_opened_before_capture_is_counted_then_reset_and_its_reconnect_is_proxied() {
    privileged!(redirect_tests::cni::plugins_missing());
    let host = CniHost::new();
    let m = Meshed::new(&host);
    let dst = format!("{GATEWAY}:81");
    let mut server = Command::new(bin_path("probe-hold"));
    server
        .args(["serve", "--name", "held", "--tcp", &dst, "--netns"])
        .arg(host.ns.path());
    let mut server = Child::spawn("probe-hold serve", server).expect("the server");
    server
        .wait_line("ready", WAIT, |l| l == "ready")
        .expect("server ready");
    let mut client = Command::new(bin_path("probe-hold"));
    client
        .args([
            "connect", "--dst", &dst, "--uid", "1000", "--gid", "1000", "--netns",
        ])
        .arg(m.pod.netns.path())
        .arg("--cgroup")
        .arg(m.cgroups.app.path());
    let mut client = Child::spawn("probe-hold connect", client).expect("the client");
    let direct = format!("\"at\":\"held/{dst}\"");
    client
        .wait_line("the held connection, direct", WAIT, |l| l.contains(&direct))
        .expect("held");

    // Enrolled in place: the connection goes on outside capture, and is counted.
    m.report(true);
    let _daemon = m.daemon(&[]);
    let list = wait_for("the pod enrolled, its connection counted", &m.node, |l| {
        l.len() == 1 && l[0]["outside_capture"] == 1
    });
    assert_eq!(list[0]["pod"]["name"], "web-1", "{list:?}");
    let seen = client.lines().len();
    let after = eventually("answers on the held connection since", WAIT, || {
        let lines = client.lines();
        if lines.len() > seen + 3 {
            Ok(lines[seen..].to_vec())
        } else {
            Err(lines.len())
        }
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        after.iter().all(|l| l.contains(&direct)),
        "not the held direct connection: {after:?}"
    );
    assert!(
        !client.lines().iter().any(|l| l.starts_with("ended")),
        "the connection ended without being asked: {:?}",
        client.lines()
    );

    // The pod asks: reset; the application reconnects through the proxy.
    let asked = m.report_edited(true, |pod| {
        pod["metadata"]["annotations"]["redirect.dev/reset-uncaptured"] = "true".into();
    });
    m.api.event("MODIFIED", &asked);
    client
        .wait_line("the held connection reset", WAIT, |l| {
            l.starts_with("ended")
        })
        .expect("reset");
    let proxied = format!("\"at\":\"proxy/[::]:15001\",\"orig\":\"{dst}\"");
    client
        .wait_line("the reconnect at the proxy", WAIT, |l| l.contains(&proxied))
        .expect("proxied");
    wait_for("nothing outside capture", &m.node, |l| {
        l.len() == 1 && l[0]["outside_capture"] == 0
    });
}
