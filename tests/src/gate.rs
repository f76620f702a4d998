//! Deterministic namespace swaps for "a namespace path is opened once": a path of the test's
//! own bind-mounted onto a namespace ([`SwapPath`]), and a fanotify permission gate on a
//! namespace's inode ([`OpenGate`]) that holds the first open by another process until the
//! test has remounted the path onto another namespace, and records every open it saw.
use std::{
    os::fd::AsFd as _,
    path::{Path, PathBuf},
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread::JoinHandle,
};

use nix::{
    mount::{mount, umount2, MntFlags, MsFlags},
    poll::{poll, PollFd, PollFlags, PollTimeout},
    sys::fanotify::{
        EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response,
    },
};
use redirect_testkit::unique_name;

/// A file of the test's own bind-mounted onto a namespace file; unmounted and removed on drop.
#[derive(Debug)]
pub struct SwapPath {
    path: PathBuf,
}

impl SwapPath {
    /// A unique file under the temp directory, bind-mounted onto `target`.
    pub fn new(target: &Path) -> Self {
        let path = std::env::temp_dir().join(unique_name("rns"));
        std::fs::write(&path, b"").expect("create the mount point");
        let swap = Self { path };
        swap.bind(target);
        swap
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Remounts the path onto `target`.
    pub fn point_at(&self, target: &Path) {
        umount2(&self.path, MntFlags::MNT_DETACH).expect("unmount the swapped path");
        self.bind(target);
    }

    fn bind(&self, target: &Path) {
        mount(
            Some(target),
            &self.path,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| {
            panic!(
                "bind {} onto {}: {e}",
                target.display(),
                self.path.display()
            )
        });
    }
}

impl Drop for SwapPath {
    fn drop(&mut self) {
        let _ = umount2(&self.path, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers every open of one namespace file (by inode) and runs `first` while it holds the
/// first open by a process of interest, before letting that open go on. Dropping it (or
/// [`OpenGate::finish`]) lets every pending open through.
#[derive(Debug)]
pub struct OpenGate {
    stop: Arc<AtomicBool>,
    opens: Arc<Mutex<Vec<i32>>>,
    thread: Option<JoinHandle<()>>,
}

impl OpenGate {
    /// Watches opens of the namespace file at `watched`. The processes of interest: `only`,
    /// or, when `None`, any but this test process.
    pub fn new(watched: &Path, only: Option<i32>, first: impl FnOnce() + Send + 'static) -> Self {
        let fan = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
            EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC,
        )
        .expect("fanotify_init (root, CONFIG_FANOTIFY_ACCESS_PERMISSIONS)");
        fan.mark(
            MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_INODE,
            MaskFlags::FAN_OPEN_PERM,
            None,
            Some(watched),
        )
        .unwrap_or_else(|e| panic!("fanotify_mark {}: {e}", watched.display()));
        let stop = Arc::new(AtomicBool::new(false));
        let opens = Arc::new(Mutex::new(Vec::new()));
        let me = std::process::id() as i32;
        let thread = {
            let (stop, opens) = (stop.clone(), opens.clone());
            std::thread::spawn(move || {
                let mut first = Some(first);
                while !stop.load(Ordering::Relaxed) {
                    let mut fds = [PollFd::new(fan.as_fd(), PollFlags::POLLIN)];
                    if !matches!(poll(&mut fds, PollTimeout::from(50u16)), Ok(n) if n > 0) {
                        continue;
                    }
                    for event in fan.read_events().unwrap_or_default() {
                        let pid = event.pid();
                        let ours = only.map_or(pid != me, |p| p == pid);
                        if ours {
                            opens.lock().expect("opens").push(pid);
                            if let Some(f) = first.take() {
                                f();
                            }
                        }
                        if let Some(fd) = event.fd() {
                            let _ =
                                fan.write_response(FanotifyResponse::new(fd, Response::FAN_ALLOW));
                        }
                    }
                }
            })
        };
        Self {
            stop,
            opens,
            thread: Some(thread),
        }
    }

    /// Stops watching; returns the pids of the opens of interest it saw, in order.
    pub fn finish(mut self) -> Vec<i32> {
        self.stop_thread();
        self.opens.lock().expect("opens").clone()
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for OpenGate {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

/// The netns cookie and inode of the namespace file at `path` (opened by this test).
pub fn cookie_and_inode(path: &Path) -> (u64, u64) {
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).expect("stat netns"));
    let cookie = redirect_testkit::netns::in_netns(path, || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").expect("socket in the namespace");
        let mut value: u64 = 0;
        let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
        // SAFETY: syscall edge: `value` is a valid u64 buffer of `len` bytes for the kernel.
        let rc = unsafe {
            libc::getsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&s),
                libc::SOL_SOCKET,
                libc::SO_NETNS_COOKIE,
                (&raw mut value).cast(),
                &mut len,
            )
        };
        assert_eq!(
            rc,
            0,
            "SO_NETNS_COOKIE: {}",
            std::io::Error::last_os_error()
        );
        value
    })
    .expect("enter the namespace");
    (cookie, ino)
}

/// The u64s a pinned map holds: its keys (`keys`) or its values, as `bpftool map dump` prints
/// them (8 little-endian bytes each; longer keys or values: their first 8 bytes). None when
/// the map is not pinned (the datapath was removed).
pub fn pinned_u64s(map: &Path, keys: bool) -> Vec<u64> {
    if !map.exists() {
        return Vec::new();
    }
    let out = Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(map)
        .output()
        .expect("run bpftool");
    assert!(
        out.status.success(),
        "bpftool map dump {}: {out:?}",
        map.display()
    );
    let entries: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool json");
    let field = if keys { "key" } else { "value" };
    entries
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e[field].as_array())
        .map(|bytes| {
            let mut b = [0u8; 8];
            for (i, v) in bytes.iter().take(8).enumerate() {
                let text = v.as_str().unwrap_or("0x0").trim_start_matches("0x");
                b[i] = u8::from_str_radix(text, 16).unwrap_or(0);
            }
            u64::from_le_bytes(b)
        })
        .collect()
}

/// The namespace inodes of every netns bpf_link on the machine (`bpftool link show`).
pub fn netns_link_inodes() -> Vec<u64> {
    let out = Command::new("bpftool")
        .args(["-j", "link", "show"])
        .output()
        .expect("run bpftool");
    assert!(out.status.success(), "bpftool link show: {out:?}");
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool json");
    links
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l["netns_ino"].as_u64())
        .collect()
}
