//! Network namespace lookups: the netns cookie and the namespace's own addresses.
use std::{
    fs::File,
    net::IpAddr,
    os::fd::{AsFd as _, AsRawFd as _},
    path::Path,
};

use crate::error::{Error, Result};

/// Runs `f` on a thread that has entered the namespace at `path`.
pub(crate) fn in_netns<T: Send + 'static>(
    path: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T> {
    let file = File::open(path).map_err(|e| Error::io("opening network namespace", path, e))?;
    let shown = path.to_path_buf();
    std::thread::spawn(move || {
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(std::io::Error::from)?;
        f()
    })
    .join()
    .map_err(|_| {
        Error::io(
            "inspecting network namespace",
            &shown,
            std::io::Error::other("thread panicked"),
        )
    })?
    .map_err(|e| Error::io("inspecting network namespace", shown, e))
}

/// The namespace's cookie, as BPF programs see it (`SO_NETNS_COOKIE` of a socket created in it).
pub fn cookie(path: &Path) -> Result<u64> {
    in_netns(path, || {
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

/// The cookie of the network namespace socket `fd` belongs to (`SO_NETNS_COOKIE`).
pub fn socket_cookie_of_netns(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u64> {
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

/// The namespace's own addresses, loopback excluded.
pub fn addresses(path: &Path) -> Result<Vec<IpAddr>> {
    in_netns(path, || {
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
            if !ip.is_loopback() && !out.contains(&ip) {
                out.push(ip);
            }
        }
        out.sort();
        Ok(out)
    })
}

/// The index of interface `name` inside the namespace, `None` when it has no such interface.
pub fn ifindex(path: &Path, name: &str) -> Result<Option<u32>> {
    let name = name.to_owned();
    in_netns(path, move || {
        Ok(nix::net::if_::if_nametoindex(name.as_str()).ok())
    })
}

/// The namespace file for a `--netns` value: a path as is, a bare name under `/run/netns`, and
/// no value: the namespace this process runs in.
pub fn resolve(name: Option<&str>) -> std::path::PathBuf {
    match name {
        None => std::path::PathBuf::from("/proc/self/ns/net"),
        Some(n) if n.contains('/') => std::path::PathBuf::from(n),
        Some(n) => Path::new("/run/netns").join(n),
    }
}

/// The inode of a namespace file (what `/proc/PID/ns/net` links name), identifying it for as
/// long as it exists.
pub fn inode(path: &Path) -> Result<u64> {
    std::fs::metadata(path)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .map_err(|e| Error::io("reading network namespace", path, e))
}
