//! The daemon's directory must be its own (issue 31, finding 9): one a local user owns (made
//! before the daemon's first start, in a world-writable parent) would let that user change
//! its mode back and replace the socket or the enrollment files. The daemon refuses to start
//! there, naming the directory and its owner, and makes nothing in it.
use redirect_testkit::{privileged, Spawn};
use redirect_tests::node::Node;

#[test]
fn a_daemon_directory_another_user_owns_is_refused_and_nothing_is_made_in_it() {
    privileged!();
    let node = Node::new();
    std::fs::create_dir_all(&node.dir).expect("the directory");
    let nobody = nix::unistd::Uid::from_raw(65534);
    nix::unistd::chown(&node.dir, Some(nobody), None).expect("chown to nobody");
    let started = node.start_daemon(Spawn::new("redirect daemon"), node.daemon_cmd(&[]));
    let err = match started {
        Ok((daemon, ready)) => {
            drop(daemon);
            panic!("the daemon started in a directory uid 65534 owns: {ready}");
        }
        Err(e) => format!("{e:#}"),
    };
    assert!(
        err.contains(&node.dir.display().to_string()) && err.contains("owned by uid 65534"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(&node.dir)
        .expect("the directory")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(left.is_empty(), "made in the refused directory: {left:?}");

    // The same directory given back to root: the daemon starts and makes it private.
    nix::unistd::chown(&node.dir, Some(nix::unistd::Uid::from_raw(0)), None).expect("chown");
    std::fs::set_permissions(
        &node.dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let daemon = node.daemon();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&node.dir).expect("stat").permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "not made private");
    drop(daemon);
}
