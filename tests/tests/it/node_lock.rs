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

/// A bpffs of the kernel's default mode 1777 (what `mount -t bpf bpf DIR` gives) mounted at a
/// directory of the test's own, unmounted on drop.
struct OpenBpffs(std::path::PathBuf);

impl OpenBpffs {
    fn mount() -> Self {
        let dir = std::env::temp_dir().join(unique_name("rbpffs"));
        std::fs::create_dir(&dir).expect("a mount point");
        nix::mount::mount(
            Some("bpf"),
            &dir,
            Some("bpf"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .expect("mount -t bpf");
        Self(dir)
    }
}

impl Drop for OpenBpffs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// `sh -c SCRIPT` as uid and gid 65534, no supplementary groups.
fn as_nobody(script: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--",
        "sh",
        "-c",
        script,
    ]);
    cmd
}

/// Another user cannot stall the datapath's writers by taking its lock, nor plant its pin
/// directory, where bpffs is mode 1777 (issue 46, finding 4): a lock directory made and held
/// by uid 65534 is refused at once, naming it and the fix (`mode=700`), instead of waited on
/// for ever; so is a pin directory uid 65534 made before the first start.
#[test]
fn another_users_lock_or_pin_directory_is_refused_at_once_not_waited_on() {
    privileged!();
    let bpffs = OpenBpffs::mount();
    let mut node =
        redirect_testkit::Node::new(&redirect_tests::env::bin_path("redirect")).expect("a node");
    node.pins = bpffs.0.join(unique_name("rnq"));
    let lock = bpffs.0.join(format!(
        "{}_lock",
        node.pins.file_name().expect("name").to_string_lossy()
    ));
    let pod = Netns::new("rnq").expect("netns");
    let apply = |node: &redirect_testkit::Node| {
        let mut child = node
            .cmd(&["istio-iptables", "--netns"])
            .arg(pod.path())
            .arg("--cgroup")
            .arg(node.cgroup.path())
            .args(["-u", "1337", "-i", "*"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("istio-iptables");
        let ended = until("the writer ends", Duration::from_secs(20), || {
            child.try_wait().is_ok_and(|s| s.is_some())
        });
        if ended.is_err() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().expect("the writer");
        (ended.is_ok(), out)
    };

    // The lock, made and held by uid 65534.
    let mut squatter = redirect_testkit::Child::spawn(
        "the squatter",
        as_nobody(&format!(
            "mkdir {0} && exec 9<{0} && flock 9 && echo held && exec sleep 600",
            lock.display()
        )),
    )
    .expect("the squatter");
    squatter
        .wait_line("held", Duration::from_secs(10), |l| l == "held")
        .expect("uid 65534 holds the lock");
    let (ended, out) = apply(&node);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    drop(squatter);
    let _ = std::fs::remove_dir(&lock);
    assert!(ended, "the writer waited on uid 65534's lock: {err}");
    assert!(
        !out.status.success() && err.contains("owned by uid 65534") && err.contains("mode=700"),
        "{out:?}"
    );
    assert!(!node.pins.exists(), "something was pinned");

    // The pin directory, made by uid 65534 before the first start.
    let made = as_nobody(&format!("mkdir -m 777 {}", node.pins.display()))
        .status()
        .expect("mkdir");
    assert!(made.success());
    let (ended, out) = apply(&node);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir(&node.pins);
    assert!(ended, "the writer did not end: {err}");
    assert!(
        !out.status.success() && err.contains("owned by uid 65534") && err.contains("mode=700"),
        "{out:?}"
    );
}
