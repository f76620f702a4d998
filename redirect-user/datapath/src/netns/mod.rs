//! Network namespaces, opened once: [`NetnsHandle`] holds the descriptor that every lookup
//! (cookie, addresses, interfaces, routes, listeners) and the sk_lookup link of one apply go
//! through, so they all see one namespace whatever its path names meanwhile. The calling thread
//! enters the namespace, once, when it is opened: it reads the cookie and makes the namespace's
//! rtnetlink and sock_diag sockets (which every later lookup uses from any thread), and goes
//! back to its own namespace.
pub(crate) mod adopt;
pub(crate) mod conns;
mod inet_diag;
pub(crate) mod names;
pub(crate) mod pod_files;
pub(crate) mod proc_tcp;
pub(crate) mod routes;
mod rtnl;
pub(crate) mod sockdiag;
mod sysctl;
pub(crate) mod tproxy;
use std::{
    fs::File,
    net::IpAddr,
    os::{
        fd::{AsFd, AsRawFd as _, BorrowedFd},
        unix::fs::MetadataExt as _,
    },
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use redirect_common::NetnsCookie;
use rustix::{
    net::{socket_with, AddressFamily, SocketFlags, SocketType},
    thread::{move_into_link_name_space, LinkNameSpaceType},
};

use crate::{
    error::{Error, Result},
    netns::rtnl::RouteSocket,
    netns::sockdiag::{DiagSocket, Listening},
};

/// The sockets made inside the namespace when it was opened.
#[derive(Debug)]
struct Sockets {
    route: RouteSocket,
    /// `None` where the kernel has no `NETLINK_SOCK_DIAG` (listeners then come from
    /// `/proc/net/tcp`, read by a thread inside the namespace).
    diag: Option<DiagSocket>,
}

/// A network namespace opened by path: the descriptor, and the cookie and inode read from
/// it when it was opened.
#[derive(Debug)]
pub struct NetnsHandle {
    file: File,
    path: PathBuf,
    cookie: NetnsCookie,
    dev: u64,
    ino: u64,
    sockets: Arc<Mutex<Sockets>>,
}

impl NetnsHandle {
    /// Opens the namespace at `path` (the only time the path is opened); the calling thread
    /// enters it through the descriptor to read its cookie and make its sockets, and returns.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io("opening network namespace", path, e))?;
        Self::from_file(file, path)
    }

    /// The namespace behind `file`, a descriptor another process opened and handed over
    /// (`SCM_RIGHTS`), known by `path` from now on (what [`NetnsHandle::at_path`] looks up). A
    /// descriptor of anything but a network namespace is refused: entering it fails.
    pub fn from_file(file: File, path: &Path) -> Result<Self> {
        let meta = file
            .metadata()
            .map_err(|e| Error::io("reading network namespace", path, e))?;
        let (cookie, sockets) = in_namespace(file.as_fd(), path, || {
            let cookie = cookie_here()?;
            let route = RouteSocket::open()?;
            let diag = DiagSocket::open()
                .inspect_err(|e| tracing::debug!(error = %e, "no NETLINK_SOCK_DIAG socket"))
                .ok();
            Ok((cookie, Sockets { route, diag }))
        })?;
        tracing::debug!(netns = %path.display(), %cookie, inode = meta.ino(), "network namespace opened");
        Ok(Self {
            file,
            path: path.to_path_buf(),
            cookie,
            dev: meta.dev(),
            ino: meta.ino(),
            sockets: Arc::new(Mutex::new(sockets)),
        })
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
            sockets: Arc::clone(&self.sockets),
        })
    }

    /// The path it was opened by (for logs and errors; never opened again).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its cookie, as BPF programs see it.
    pub fn cookie(&self) -> NetnsCookie {
        self.cookie
    }

    /// Its inode (what `/proc/PID/ns/net` links name).
    pub fn inode(&self) -> u64 {
        self.ino
    }

    /// Runs `f` inside this namespace (on the calling thread, which is then put back). `f`
    /// must not start threads or runtimes: they would stay in this namespace.
    pub fn run<T>(&self, f: impl FnOnce() -> std::io::Result<T>) -> Result<T> {
        in_namespace(self.file.as_fd(), &self.path, f)
    }

    /// Reads the cookie again through the descriptor (`SO_NETNS_COOKIE` of a socket made in it).
    pub fn read_cookie(&self) -> Result<NetnsCookie> {
        self.run(cookie_here)
    }

    /// Runs `f` with the namespace's rtnetlink socket (on the caller's thread).
    pub(crate) fn with_route_socket<T>(
        &self,
        f: impl FnOnce(&RouteSocket) -> std::io::Result<T>,
    ) -> Result<T> {
        let sockets = self.sockets.lock().unwrap_or_else(|e| e.into_inner());
        f(&sockets.route).map_err(|e| Error::io("inspecting network namespace", &self.path, e))
    }

    /// The namespace's own addresses, loopback and `::6` excluded (see
    /// [`RouteSocket::addresses`]), sorted.
    pub fn addresses(&self) -> Result<Vec<IpAddr>> {
        self.with_route_socket(RouteSocket::addresses)
    }

    /// [`NetnsHandle::addresses`] from at most `cap` of the kernel's address messages, and
    /// whether it held more.
    pub(crate) fn addresses_at_most(&self, cap: usize) -> Result<(Vec<IpAddr>, bool)> {
        self.with_route_socket(|s| s.addresses_at_most(cap))
    }

    /// The index of each of `names` inside the namespace, `None` for a name it has no
    /// interface of.
    pub(crate) fn ifindexes(&self, names: &[String]) -> Result<Vec<Option<u32>>> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.with_route_socket(|s| s.indexes(&names))
    }

    /// The index of interface `name` inside the namespace, `None` when it has no such interface.
    pub fn ifindex(&self, name: &str) -> Result<Option<u32>> {
        Ok(self
            .with_route_socket(|s| s.indexes(&[name]))?
            .pop()
            .flatten())
    }

    /// The TCP sockets listening on `port` in the namespace: socket diagnostics through the
    /// namespace's own socket, or `/proc/net/tcp{,6}` read inside it where the kernel has
    /// none (see `proc_tcp`).
    pub(crate) fn listeners(&self, port: u16) -> Result<Vec<Listening>> {
        {
            let sockets = self.sockets.lock().unwrap_or_else(|e| e.into_inner());
            match sockets.diag.as_ref().map(|d| d.listening(port)) {
                Some(Ok(found)) => return Ok(found),
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "no socket diagnostics: reading /proc/net/tcp")
                }
                None => {}
            }
        }
        self.run(|| Ok(crate::netns::proc_tcp::listening(port)))
    }

    /// The namespace's established TCP connections and the ports something listens on
    /// ([`conns`]), through its own socket diagnostics.
    pub(crate) fn connections(&self) -> Result<(Vec<conns::Connection>, Vec<u16>)> {
        self.with_diag("listing the TCP connections of network namespace", |d| {
            d.connections()
        })
    }

    /// Resets one of its connections (`SOCK_DESTROY`, see [`conns`]).
    pub fn destroy(&self, conn: &conns::Connection) -> Result<()> {
        let op = "resetting a TCP connection (SOCK_DESTROY) of network namespace";
        self.with_diag(op, |d| d.destroy(conn))
    }

    /// `f` on the namespace's sock_diag socket (`op` names it in errors; none: unsupported).
    fn with_diag<T>(
        &self,
        op: &'static str,
        f: impl FnOnce(&DiagSocket) -> std::io::Result<T>,
    ) -> Result<T> {
        let sockets = self.sockets.lock().unwrap_or_else(|e| e.into_inner());
        let diag = sockets
            .diag
            .as_ref()
            .ok_or_else(|| Error::io(op, &self.path, std::io::ErrorKind::Unsupported.into()))?;
        f(diag).map_err(|e| Error::io(op, &self.path, e))
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
    pub(crate) fn verify(&self) -> Result<()> {
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

/// Runs `f` on the calling thread inside the namespace of descriptor `fd` (`path` names it in
/// errors), then puts the thread back in its own namespace. No thread is spawned: on a busy
/// node a spawned thread waits for a CPU twice (to start, and its joiner to wake), which was
/// most of an enrollment's time under load.
fn in_namespace<T>(
    fd: BorrowedFd<'_>,
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T>,
) -> Result<T> {
    const HOME: &str = "/proc/thread-self/ns/net";
    let err = |e: std::io::Error| Error::io("inspecting network namespace", path, e);
    let home = File::open(HOME).map_err(|e| Error::io("opening", Path::new(HOME), e))?;
    // Already there (a command run inside the pod it applies to): no setns, which would need
    // CAP_SYS_ADMIN that istio-init's container does not have.
    let id = |f: BorrowedFd<'_>| rustix::fs::fstat(f).map(|s| (s.st_dev, s.st_ino));
    if id(fd).is_ok_and(|there| id(home.as_fd()).is_ok_and(|here| here == there)) {
        return f().map_err(err);
    }
    move_into_link_name_space(fd, Some(LinkNameSpaceType::Network))
        .map_err(|e| err(std::io::Error::from(e)))?;
    let back = GoHome(home);
    let out = f();
    drop(back);
    out.map_err(err)
}

/// A new, empty network namespace that no process runs in, held by the returned descriptor
/// alone (it is freed when that closes). Made on the calling thread (`unshare`), which is then
/// put back in its own namespace; no thread is spawned.
pub(crate) fn private() -> Result<File> {
    const HOME: &str = "/proc/thread-self/ns/net";
    let home = File::open(HOME).map_err(|e| Error::io("opening", Path::new(HOME), e))?;
    // SAFETY: syscall edge. rustix marks unshare unsafe for CLONE_FILES (a thread then no
    // longer sees descriptors opened elsewhere); only CLONE_NEWNET is passed, which changes
    // nothing Rust or another thread relies on (the thread is moved back below).
    let unshared = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) };
    unshared.map_err(|e| {
        Error::io(
            "creating a private network namespace (unshare CLONE_NEWNET) from",
            Path::new(HOME),
            e.into(),
        )
    })?;
    let back = GoHome(home);
    let made = File::open(HOME).map_err(|e| Error::io("opening", Path::new(HOME), e));
    drop(back);
    made
}

/// Puts the calling thread back into the namespace it came from, on return and on unwind.
struct GoHome(File);

impl Drop for GoHome {
    fn drop(&mut self) {
        if let Err(e) = move_into_link_name_space(self.0.as_fd(), Some(LinkNameSpaceType::Network))
        {
            // A thread left in a pod's namespace would make every later socket there (the
            // daemon's own, another pod's lookups): nothing safe is left but to stop.
            tracing::error!(error = %e, "cannot return to this thread's own network namespace: aborting");
            std::process::abort();
        }
    }
}

/// The cookie of the calling thread's namespace: `SO_NETNS_COOKIE` of a socket made in it
/// (unbound: binding would fail in a namespace whose loopback is down).
fn cookie_here() -> std::io::Result<NetnsCookie> {
    let socket = socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    socket_cookie_of_netns(socket.as_fd())
}

/// The cookie of the namespace at `path` (opened once, for this one answer).
pub fn cookie(path: &Path) -> Result<NetnsCookie> {
    NetnsHandle::open(path).map(|h| h.cookie)
}

/// The cookie of the network namespace socket `fd` belongs to (`SO_NETNS_COOKIE`).
pub fn socket_cookie_of_netns(fd: BorrowedFd<'_>) -> std::io::Result<NetnsCookie> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // By hand: none of socket2, nix 0.29 and rustix 1.1 has SO_NETNS_COOKIE.
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
        Ok(NetnsCookie(value))
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
