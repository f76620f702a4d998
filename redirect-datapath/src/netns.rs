//! Network namespaces, opened once: [`NetnsHandle`] holds the descriptor that every lookup
//! (cookie, addresses, interfaces, routes, listeners) and the sk_lookup link of one apply go
//! through, so they all see one namespace whatever its path names meanwhile.
use std::{
    fs::File,
    net::IpAddr,
    os::{
        fd::{AsFd, AsRawFd as _, BorrowedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// `::6`, the proxy's IPv6 passthrough source.
const PASSTHROUGH_V6: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6));

/// A network namespace opened by path: the descriptor, and the cookie and inode read from
/// it when it was opened.
#[derive(Debug)]
pub struct NetnsHandle {
    file: File,
    path: PathBuf,
    cookie: u64,
    dev: u64,
    ino: u64,
}

impl NetnsHandle {
    /// Opens the namespace at `path` (the only time the path is opened) and reads its cookie
    /// through the descriptor.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io("opening network namespace", path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("reading network namespace", path, e))?;
        let mut handle = Self {
            file,
            path: path.to_path_buf(),
            cookie: 0,
            dev: meta.dev(),
            ino: meta.ino(),
        };
        handle.cookie = handle.read_cookie()?;
        tracing::debug!(netns = %path.display(), cookie = handle.cookie, inode = handle.ino, "network namespace opened");
        Ok(handle)
    }

    /// The same namespace on a second descriptor (`dup`): the path is not opened again.
    pub fn try_clone(&self) -> Result<Self> {
        Ok(Self {
            file: self
                .file
                .try_clone()
                .map_err(|e| Error::io("duplicating network namespace", &self.path, e))?,
            path: self.path.clone(),
            cookie: self.cookie,
            dev: self.dev,
            ino: self.ino,
        })
    }

    /// The path it was opened by (for logs and errors; never opened again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its cookie, as BPF programs see it.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// Its inode (what `/proc/PID/ns/net` links name).
    pub fn inode(&self) -> u64 {
        self.ino
    }

    /// Runs `f` on a thread that has entered this namespace.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> std::io::Result<T> + Send) -> Result<T> {
        let fd = self.file.as_fd();
        std::thread::scope(|s| {
            s.spawn(move || {
                nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(std::io::Error::from)?;
                f()
            })
            .join()
        })
        .map_err(|_| {
            Error::io(
                "inspecting network namespace",
                &self.path,
                std::io::Error::other("thread panicked"),
            )
        })?
        .map_err(|e| Error::io("inspecting network namespace", &self.path, e))
    }

    /// Reads the cookie again through the descriptor (`SO_NETNS_COOKIE` of a socket made in it).
    pub fn read_cookie(&self) -> Result<u64> {
        self.run(|| {
            // Unbound: binding would fail in a namespace whose loopback is down.
            let socket = nix::sys::socket::socket(
                nix::sys::socket::AddressFamily::Inet,
                nix::sys::socket::SockType::Datagram,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
                None,
            )
            .map_err(std::io::Error::from)?;
            socket_cookie_of_netns(socket.as_fd())
        })
    }

    /// The namespace's own addresses, loopback and `::6` excluded: `::6` is the proxy's IPv6
    /// passthrough source that istio-proxy puts on every dual-stack pod's lo (the outbound
    /// decision treats it as loopback), so it names no pod in the address-keyed `POD_ADDRS`.
    pub fn addresses(&self) -> Result<Vec<IpAddr>> {
        self.run(|| {
            let mut out = Vec::new();
            for ifa in nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)? {
                let Some(addr) = ifa.address else { continue };
                let ip = if let Some(v4) = addr.as_sockaddr_in() {
                    IpAddr::V4(v4.ip())
                } else if let Some(v6) = addr.as_sockaddr_in6() {
                    IpAddr::V6(v6.ip())
                } else {
                    continue;
                };
                if !ip.is_loopback() && ip != PASSTHROUGH_V6 && !out.contains(&ip) {
                    out.push(ip);
                }
            }
            out.sort();
            Ok(out)
        })
    }

    /// The index of each of `names` inside the namespace, `None` for a name it has no
    /// interface of.
    pub fn ifindexes(&self, names: &[String]) -> Result<Vec<Option<u32>>> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        self.run(|| {
            Ok(names
                .iter()
                .map(|n| nix::net::if_::if_nametoindex(n.as_str()).ok())
                .collect())
        })
    }

    /// The index of interface `name` inside the namespace, `None` when it has no such interface.
    pub fn ifindex(&self, name: &str) -> Result<Option<u32>> {
        self.run(|| Ok(nix::net::if_::if_nametoindex(name).ok()))
    }

    /// Whether its path still names this namespace (same device and inode; the path is
    /// looked up, not opened). `None` when the path names nothing any more.
    pub fn at_path(&self) -> Result<Option<bool>> {
        match std::fs::metadata(&self.path) {
            Ok(m) => Ok(Some((m.dev(), m.ino()) == (self.dev, self.ino))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io("reading network namespace", &self.path, e)),
        }
    }

    /// After an apply's last write: the path still names this namespace; else an error
    /// naming the path and both namespaces.
    pub fn verify(&self) -> Result<()> {
        // The descriptor pins the namespace, so its device and inode cannot be given to
        // another one meanwhile: the same pair at the path is the same namespace (its cookie
        // through the descriptor cannot have changed; no thread has to enter it again).
        if self.at_path()? == Some(true) {
            return Ok(());
        }
        let found = match std::fs::metadata(&self.path) {
            // Another namespace at the path: its cookie, for the message only.
            Ok(m) => match NetnsHandle::open(&self.path) {
                Ok(other) => format!("netns cookie {}, inode {}", other.cookie, m.ino()),
                Err(_) => format!("inode {}", m.ino()),
            },
            Err(e) => format!("nothing ({e})"),
        };
        Err(Error::NetnsChanged {
            path: self.path.clone(),
            cookie: self.cookie,
            inode: self.ino,
            found,
        })
    }
}

impl AsFd for NetnsHandle {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// The cookie of the namespace at `path` (opened once, for this one answer).
pub fn cookie(path: &Path) -> Result<u64> {
    NetnsHandle::open(path).map(|h| h.cookie)
}

/// The cookie of the network namespace socket `fd` belongs to (`SO_NETNS_COOKIE`).
pub fn socket_cookie_of_netns(fd: BorrowedFd<'_>) -> std::io::Result<u64> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: syscall edge: `value` is a valid u64 buffer of `len` bytes for the kernel to fill.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NETNS_COOKIE,
            (&raw mut value).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The namespace file for a `--netns` value: a path as is, a bare name under `/run/netns`, and
/// no value: the namespace this process runs in.
pub fn resolve(name: Option<&str>) -> PathBuf {
    match name {
        None => PathBuf::from("/proc/self/ns/net"),
        Some(n) if n.contains('/') => PathBuf::from(n),
        Some(n) => Path::new("/run/netns").join(n),
    }
}
