//! One lock per pinned datapath (issue 34, item 6): a writer holding one datapath's lock (here a
//! `redirect istio-iptables` stuck opening its namespace path, a FIFO nobody writes yet) never
//! holds up a writer of another datapath on the same host; the lock leaves nothing behind.
use std::time::Duration;

use redirect_testkit::{privileged, unique_name, until, Netns};
use redirect_tests::node::Node;

#[test]
fn two_datapaths_on_one_host_never_wait_on_each_other() {
    privileged!();
    let (a, b) = (Node::new(), Node::new());
    let fifo = std::env::temp_dir().join(unique_name("rnl"));
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let stuck = a
        .cmd(&["istio-iptables", "--netns"])
        .arg(&fifo)
        .args(["--cgroup"])
        .arg(a.cgroup.path())
        .args(["-u", "1337", "-i", "*"])
        .spawn()
        .expect("start the stuck writer");
    let lock = a.pins.parent().expect("bpffs").join(format!(
        "{}_lock",
        a.pins.file_name().expect("name").to_string_lossy()
    ));
    // Under its lock, it waits for a writer of the FIFO.
    let wchan = format!("/proc/{}/wchan", stuck.id());
    until(
        "A's writer stuck opening its namespace path",
        Duration::from_secs(10),
        || std::fs::read_to_string(&wchan).is_ok_and(|w| w.trim() == "wait_for_partner"),
    )
    .expect("A stuck");

    // B's writer finishes while A's is still stuck holding A's lock.
    let pod = Netns::new("rnlb").expect("netns");
    let mut done = b
        .cmd(&["istio-iptables", "--netns"])
        .arg(pod.path())
        .arg("--cgroup")
        .arg(b.cgroup.path())
        .args(["-u", "1337", "-i", "*"])
        .spawn()
        .expect("B's writer");
    let finished = until("B's writer done", Duration::from_secs(20), || {
        done.try_wait().is_ok_and(|s| s.is_some())
    });
    // Release A: its writer opens the FIFO, finds no namespace there and exits.
    let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    let mut stuck = stuck;
    let a_status = stuck.wait().expect("A's writer exits");
    if finished.is_err() {
        let _ = done.kill();
    }
    let b_status = done.wait().expect("B's writer");
    finished.expect("B's writer finished while A held A's lock");
    assert!(b_status.success(), "B's apply failed: {b_status:?}");
    assert!(!a_status.success(), "A's writer applied a FIFO?");
    until("A's lock directory removed", Duration::from_secs(5), || {
        !lock.exists()
    })
    .expect("nothing left behind");
    b.ok(&["uninstall"]);
    let _ = std::fs::remove_file(&fifo);
}
