//! `redirect status` says "up" only for a daemon that answers: one that runs but does not
//! answer on its socket (stopped here with SIGSTOP, as a hung daemon would be) is named so,
//! and "up" again once it answers. `redirect ping`, the DaemonSet's readiness and liveness
//! probe, fails (exit 1, saying so) with no daemon and with one that does not answer.
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redirect_testkit::privileged;
use redirect_tests::node::Node;

#[test]
fn a_daemon_that_does_not_answer_is_not_called_up() {
    privileged!();
    let node = Node::new();
    let out = node.run(&["ping", "--timeout-ms", "500"]);
    assert_eq!(out.status.code(), Some(1), "no daemon: {out:?}");
    // The OS's reason is said once (the client error already ends with it).
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(e.matches("(os error 2)").count(), 1, "{e}");
    let daemon = node.daemon();
    let said = node.ok(&["ping"]);
    assert!(said.contains("answers"), "{said}");
    let pid = Pid::from_raw(i32::try_from(daemon.pid()).expect("pid"));
    let up = node.ok(&["status"]);
    assert!(up.contains(&format!("pid {} (up)", daemon.pid())), "{up}");
    kill(pid, Signal::SIGSTOP).expect("SIGSTOP the test's own daemon");
    let out = node.run(&["status"]);
    let ping = node.run(&["ping", "--timeout-ms", "500"]);
    kill(pid, Signal::SIGCONT).expect("SIGCONT");
    let e = String::from_utf8_lossy(&ping.stderr);
    assert!(
        ping.status.code() == Some(1) && e.contains("does not answer within 500 ms"),
        "{ping:?}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("running but not answering on its socket") && !text.contains("(up)"),
        "{text}"
    );
    assert!(node.ok(&["status"]).contains("(up)"));
    node.ok(&["uninstall"]);
}
