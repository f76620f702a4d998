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
    let node = Node::new();
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
    let mut plugin = std::process::Command::new(redirect_tests::env::bin_path("redirect-cni"));
    plugin
        .env_clear()
        .env("CNI_COMMAND", "STATUS")
        .env("CNI_PATH", "/usr/lib/cni")
        .uid(65534)
        .gid(65534)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = plugin.spawn().expect("redirect-cni as uid 65534");
    std::io::Write::write_all(
        &mut child.stdin.take().expect("stdin"),
        conf.to_string().as_bytes(),
    )
    .expect("the config");
    let out = child.wait_with_output().expect("redirect-cni");
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
