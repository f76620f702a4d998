//! The pod's own /etc/resolv.conf, /etc/passwd and /etc/group, as the processes of its network namespace see them.
//!
//! A policy for another namespace than the caller's never reads the caller's files: its names
//! and DNS servers come from [`sources`], in this order:
//!
//! 1. (a Kubernetes pod spec: not yet; it is prepended by the caller when it exists),
//! 2. [`NetnsProcesses`]: every process whose `/proc/PID/ns/net` is the namespace, one per
//!    distinct (mount namespace, root), read through `/proc/PID/root` with `openat2`'s
//!    `RESOLVE_IN_ROOT` (an absolute symlink inside the container stays inside it),
//! 3. [`EtcNetns`]: `/etc/netns/NAME/*` for a namespace named under `/run/netns` (the files
//!    `ip netns exec NAME` puts over `/etc`).
//!
//! For the caller's own namespace (istio-init's container running `redirect istio-iptables`)
//! the caller's own `/etc` answers.
use std::{
    cell::OnceCell,
    fs::{File, OpenOptions},
    io::Read as _,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use redirect_policy::{LookupError, PodFile, PodSource, Sources, View};
use rustix::{
    fs::{openat2, Mode, OFlags, ResolveFlags},
    io::Errno,
};

/// The most of one pod file read (a passwd is a few KiB).
const MAX_FILE: u64 = 1 << 20;

/// The sources of `netns`'s files: the caller's own when `netns` is the caller's namespace,
/// else the namespace's processes, then `/etc/netns/NAME` (`name`: the `--netns` value).
pub fn sources(netns: &Path, name: Option<&str>) -> Sources {
    if same_file(netns, Path::new("/proc/thread-self/ns/net")) {
        return Sources::own();
    }
    Sources::new(netns.display().to_string(), of_namespace(netns, name))
}

/// The sources of a VM's files (`redirect vm`): the host's own namespace reads this host's
/// files; a namespace playing the VM on this host (`--netns NAME`) reads `/etc/netns/NAME`
/// first, then this host's files, which are the VM's own (no pod's files to keep apart).
pub fn vm_sources(netns: &Path, name: Option<&str>) -> Sources {
    if same_file(netns, Path::new("/proc/thread-self/ns/net")) || name.is_none() {
        return Sources::own();
    }
    let mut list: Vec<Box<dyn PodSource>> = Vec::new();
    if let Some(n) = name.filter(|n| !n.contains('/') && !n.is_empty()) {
        list.push(Box::new(EtcNetns(n.to_owned())));
    }
    list.push(Box::new(redirect_policy::OwnFiles));
    Sources::new(netns.display().to_string(), list)
}

/// The namespace-bound sources of `netns`, in order (after a pod spec, before refusing).
pub(crate) fn of_namespace(netns: &Path, name: Option<&str>) -> Vec<Box<dyn PodSource>> {
    let mut list: Vec<Box<dyn PodSource>> = vec![Box::new(NetnsProcesses::new(netns))];
    if let Some(n) = name.filter(|n| !n.contains('/') && !n.is_empty()) {
        list.push(Box::new(EtcNetns(n.to_owned())));
    }
    list
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// A process of the namespace, the first (lowest pid) of its (mount namespace, root).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct Member {
    /// Its pid.
    pub pid: i32,
    /// Its command name (`/proc/PID/comm`).
    pub(crate) comm: String,
}

/// The processes of `netns` (lowest pid first), one per distinct (mount namespace, root).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn members(netns: &Path) -> std::io::Result<Vec<Member>> {
    let target = std::fs::metadata(netns)?;
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for pid in pids {
        let proc = PathBuf::from(format!("/proc/{pid}"));
        let Ok(net) = std::fs::metadata(proc.join("ns/net")) else {
            continue;
        };
        if (net.dev(), net.ino()) != (target.dev(), target.ino()) {
            continue;
        }
        // Gone between the two reads, or a zombie: not a view of anything.
        let (Ok(mnt), Ok(root)) = (
            std::fs::metadata(proc.join("ns/mnt")),
            std::fs::metadata(proc.join("root")),
        ) else {
            continue;
        };
        if !seen.insert((mnt.ino(), root.dev(), root.ino())) {
            continue;
        }
        let comm = std::fs::read_to_string(proc.join("comm")).unwrap_or_default();
        out.push(Member {
            pid,
            comm: comm.trim_end().to_owned(),
        });
    }
    Ok(out)
}

/// Reads `file` inside the root of `pid` (symlinks resolved within that root, no magic links,
/// a regular file only). `None`: the file (or the process) is not there.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn read_in_root(pid: i32, file: PodFile) -> std::io::Result<Option<String>> {
    let root = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(format!("/proc/{pid}/root"))
    {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let fd = match openat2(
        &root,
        file.path(),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file = File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    let mut text = String::new();
    file.take(MAX_FILE).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// The processes of one network namespace as a source of its files.
#[derive(Debug)]
pub(crate) struct NetnsProcesses {
    netns: PathBuf,
    members: OnceCell<Result<Vec<Member>, String>>,
}

impl NetnsProcesses {
    /// The processes of `netns`, found at the first lookup.
    pub(crate) fn new(netns: &Path) -> Self {
        Self {
            netns: netns.to_path_buf(),
            members: OnceCell::new(),
        }
    }

    fn members(&self) -> Result<&[Member], LookupError> {
        self.members
            .get_or_init(|| members(&self.netns).map_err(|e| e.to_string()))
            .as_deref()
            .map_err(|e| LookupError::Read {
                path: format!("the processes of {}", self.netns.display()),
                error: std::io::Error::other(e.clone()),
            })
    }
}

impl PodSource for NetnsProcesses {
    fn describe(&self) -> String {
        match self.members() {
            Ok([]) => format!("no process runs in {}", self.netns.display()),
            Ok(list) => {
                let shown: Vec<String> = list
                    .iter()
                    .take(5)
                    .map(|m| format!("pid {} {}", m.pid, m.comm))
                    .collect();
                format!(
                    "none of the processes of {} has one ({}{})",
                    self.netns.display(),
                    shown.join(", "),
                    if list.len() > 5 { ", ..." } else { "" }
                )
            }
            Err(e) => e.to_string(),
        }
    }

    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError> {
        let mut out = Vec::new();
        for m in self.members()? {
            let from = format!(
                "/proc/{}/root{} (pid {}, {})",
                m.pid,
                file.path(),
                m.pid,
                m.comm
            );
            match read_in_root(m.pid, file) {
                Ok(Some(text)) => out.push(View { text, from }),
                Ok(None) => {}
                Err(error) => return Err(LookupError::Read { path: from, error }),
            }
        }
        Ok(out)
    }
}

/// `/etc/netns/NAME/*`: what `ip netns exec NAME` mounts over `/etc`.
#[derive(Debug, Clone)]
pub(crate) struct EtcNetns(pub String);

impl EtcNetns {
    fn path(&self, file: PodFile) -> PathBuf {
        let base = file.path().trim_start_matches("/etc/");
        Path::new("/etc/netns").join(&self.0).join(base)
    }
}

impl PodSource for EtcNetns {
    fn describe(&self) -> String {
        format!("/etc/netns/{} has none", self.0)
    }

    fn views(&self, file: PodFile) -> Result<Vec<View>, LookupError> {
        let path = self.path(file);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(vec![View {
                text,
                from: path.display().to_string(),
            }]),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(error) => Err(LookupError::Read {
                path: path.display().to_string(),
                error,
            }),
        }
    }
}
