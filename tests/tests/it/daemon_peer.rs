//! The daemon answers only root, whatever the socket's mode (issue 31, finding 9): with its
//! directory and socket widened (a node's tool that chmods /run, a hostPath mount of it), a
//! client of another uid connects but is refused, told why; root's commands still work, and
//! root without CAP_NET_ADMIN may read but not change capture.
use std::os::unix::{fs::PermissionsExt as _, process::CommandExt as _};

use redirect_testkit::privileged;
use redirect_tests::node::Node;

#[test]
fn a_client_of_another_uid_is_refused_even_where_the_socket_lets_it_connect() {
    privileged!();
    // Every directory on the way to the socket must let uid 65534 through, whatever $TMPDIR
    // allows: the daemon directory under /run.
    let node = Node::under_run();
    let _daemon = node.daemon();
    std::fs::set_permissions(&node.dir, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    let socket = std::fs::read_dir(&node.dir)
        .expect("the daemon directory")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            std::fs::symlink_metadata(p)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
        })
        .expect("the daemon's socket");
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");

    // The CNI plugin (a client with no root check of its own) run as uid 65534: STATUS.
    let conf = serde_json::json!({
        "cniVersion": "1.1.0", "name": "peer-test", "type": "redirect-cni",
        "daemon_socket": node.dir.join("daemon.sock"),
    });
    let out = plugin("STATUS", &conf, Some(65534));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "uid 65534 was answered: {said}");
    assert!(
        said.contains("this client runs as uid 65534"),
        "not refused by its credentials: {said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    node.ok(&["list"]);
}

/// Root without CAP_NET_ADMIN (a container that mounts the host's /run with the runtime's
/// default capabilities) reads but cannot change capture (issue 31, finding 9: reads and
/// changes split): `list` answers, while `enroll` and `unenroll` are refused, naming the
/// capability, and the enrollment stays.
#[test]
fn root_without_net_admin_may_list_but_not_enroll_or_unenroll() {
    privileged!();
    let node = Node::new();
    let _daemon = node.daemon();
    let ns = redirect_testkit::Netns::new("rpeer").expect("a namespace");
    let netns = ns.path().display().to_string();
    let enroll = [
        "enroll",
        "--netns",
        &netns,
        "--istio-args",
        "-u 1337 -i '*'",
    ];
    node.ok(&enroll);
    let listed = |node: &Node| -> usize {
        let list: Vec<serde_json::Value> =
            serde_json::from_str(&node.ok(&["list", "--json"])).expect("list --json");
        list.len()
    };
    assert_eq!(listed(&node), 1);

    let without_net_admin = |args: &[&str]| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--bounding-set", "-net_admin", "--"]);
        let inner = node.cmd(args);
        cmd.arg(inner.get_program()).args(inner.get_args());
        for (k, v) in inner.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd.output().expect("setpriv")
    };
    let list = without_net_admin(&["list", "--json"]);
    assert!(list.status.success(), "list refused: {list:?}");
    for args in [&["unenroll", "--netns", &netns][..], &enroll[..]] {
        let out = without_net_admin(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("needs CAP_NET_ADMIN"),
            "{args:?} without CAP_NET_ADMIN: {out:?}"
        );
    }
    assert_eq!(listed(&node), 1, "the enrollment was changed");
    node.ok(&["unenroll", "--netns", &netns]);
    assert_eq!(listed(&node), 0);
}

/// Whatever answers at the daemon's socket must be the daemon (issue 31, finding 9): a root
/// process without CAP_NET_ADMIN (a container that mounts the host's /run and took the path
/// over) answering a CNI ADD with "enrolled" is refused by the plugin, which fails closed,
/// instead of reporting a pod captured that nothing captures.
#[test]
fn the_plugin_refuses_an_answer_from_a_process_that_is_not_the_daemon() {
    privileged!();
    let node = Node::new();
    std::fs::create_dir_all(&node.dir).expect("the daemon directory");
    let socket = node.dir.join("daemon.sock");
    let answer = serde_json::json!({
        "v": 2, "ok": true,
        "answer": {"message": "enrolled", "pod": {"meshed": true, "decision": "meshed"}}
    });
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set", "-net_admin", "--"])
        .arg(redirect_tests::env::bin_path("probe-hold"))
        .args(["answer-unix", "--path"])
        .arg(&socket)
        .args(["--line", &answer.to_string()]);
    let mut fake = redirect_testkit::Child::spawn("fake daemon", cmd).expect("the fake daemon");
    fake.wait_line("ready", std::time::Duration::from_secs(10), |l| {
        l == "ready"
    })
    .expect("ready");
    let conf = serde_json::json!({
        "cniVersion": "1.1.0", "name": "peer-test", "type": "redirect-cni",
        "daemon_socket": socket,
    });
    let out = plugin("STATUS", &conf, None);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "the fake daemon was believed: {said}"
    );
    assert!(
        said.contains("is not the redirect daemon") && said.contains("without CAP_NET_ADMIN"),
        "{said}"
    );
}

/// `redirect-cni COMMAND` with `conf` on stdin, as `uid` (and its gid) when given.
pub(crate) fn plugin(
    command: &str,
    conf: &serde_json::Value,
    uid: Option<u32>,
) -> std::process::Output {
    let mut cmd = std::process::Command::new(redirect_tests::env::bin_path("redirect-cni"));
    cmd.env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_PATH", "/usr/lib/cni")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().expect("redirect-cni");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        conf.to_string().as_bytes(),
    )
    .expect("the config");
    child.wait_with_output().expect("redirect-cni")
}
