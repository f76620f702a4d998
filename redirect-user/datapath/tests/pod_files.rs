//! The pod's files as its process sees them: a process chrooted into a root of the test's own
//! inside a namespace of the test's own; an absolute symlink in that root resolves inside it
//! (read naively through /proc/PID/root it would leave for the host's /etc), and a FIFO
//! where a file should be is refused without blocking.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{os::unix::fs::symlink, path::PathBuf, time::Duration};

use redirect_datapath::{
    pod_file_sources,
    test_support::{self as pod_files, read_in_root},
};
use redirect_policy::{PodFile, SystemLookup as _};
use redirect_testkit::{eventually, privileged_or_skip, unique_name, Child, Netns};

/// A root directory of the test's own, removed on drop.
struct Root(PathBuf);

impl Drop for Root {
    fn drop(&mut self) {
        // The bind mount lives in the child's mount namespace only; nothing to unmount here.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A root whose /etc/resolv.conf is an absolute symlink to `/etc/<unique>.conf` (which the
/// host does not have) and whose /etc/group is a FIFO; /usr comes from the host.
fn root(target: &str) -> Root {
    let dir = std::env::temp_dir().join(unique_name("rpr"));
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc).expect("root/etc");
    std::fs::create_dir_all(dir.join("usr")).expect("root/usr");
    for top in ["bin", "lib", "lib64", "sbin"] {
        let host = PathBuf::from("/").join(top);
        match std::fs::read_link(&host) {
            Ok(to) => symlink(to, dir.join(top)).expect("mirror a merged-/usr link"),
            Err(_) if host.is_dir() => std::fs::create_dir_all(dir.join(top)).expect("mkdir"),
            Err(_) => {}
        }
    }
    std::fs::write(etc.join(target), "nameserver 10.96.0.10\n").expect("resolv target");
    symlink(format!("/etc/{target}"), etc.join("resolv.conf")).expect("absolute symlink");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        etc.join("group"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    Root(dir)
}

#[test]
fn files_are_read_inside_the_processs_own_root() {
    if !privileged_or_skip("files_are_read_inside_the_processs_own_root") {
        return;
    }
    let ns = Netns::new("rpf").expect("netns");
    let target = format!("{}.conf", unique_name("rpfresolv"));
    assert!(!PathBuf::from("/etc").join(&target).exists());
    let r = root(&target);
    let d = r.0.display();
    let mut binds = format!("mount --bind /usr {d}/usr");
    for top in ["bin", "lib", "lib64", "sbin"] {
        let p = PathBuf::from("/").join(top);
        if p.is_dir() && std::fs::read_link(&p).is_err() {
            binds.push_str(&format!(" && mount --bind /{top} {d}/{top}"));
        }
    }
    let mut cmd = ns.exec("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{binds} && exec chroot {d} /usr/bin/sleep 3600"));
    let _child = Child::spawn("chrooted process", cmd).expect("start the chrooted process");

    let pid = eventually(
        "the chrooted process to run in the namespace",
        Duration::from_secs(10),
        || {
            let members = pod_files::members(&ns.path()).map_err(|e| e.to_string())?;
            members
                .iter()
                .find(|m| {
                    std::fs::read_link(format!("/proc/{}/root", m.pid)).is_ok_and(|l| l == r.0)
                })
                .map(|m| m.pid)
                .ok_or(format!("{members:?}"))
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));

    // Naively, the absolute symlink leaves the pod for the host's /etc.
    assert!(std::fs::read_to_string(format!("/proc/{pid}/root/etc/resolv.conf")).is_err());
    assert_eq!(
        read_in_root(pid, PodFile::ResolvConf)
            .expect("read")
            .as_deref(),
        Some("nameserver 10.96.0.10\n")
    );
    assert_eq!(read_in_root(pid, PodFile::Passwd).expect("absent"), None);
    let fifo = read_in_root(pid, PodFile::Group).expect_err("a FIFO is not a file");
    assert_eq!(fifo.kind(), std::io::ErrorKind::InvalidData, "{fifo}");

    let sources = pod_file_sources(&ns.path(), Some(ns.name()));
    let view = sources.resolv_conf().expect("the pod's resolv.conf");
    assert!(
        view.from
            .starts_with(&format!("/proc/{pid}/root/etc/resolv.conf")),
        "{}",
        view.from
    );
}
