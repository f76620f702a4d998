//! Finds a proxy that was already listening on the inbound port when its namespace was
//! enrolled (sock_ops only sees new `listen()` calls) and takes its socket for `LISTENERS`,
//! only after checking it is that namespace's TCP listener on that port.
use redirect_common::NetnsCookie;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};

use redirect_common::{AF_INET, AF_INET6};

use crate::{error::Result, netns::NetnsHandle};

use crate::netns::sockdiag::Listening;

/// The listening sockets on `port` inside namespace `ns`: socket diagnostics (see
/// `sockdiag`), or `/proc/net/tcp{,6}` where the kernel has none (see `proc_tcp`).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn listeners(ns: &NetnsHandle, port: u16) -> Result<Vec<Listening>> {
    ns.listeners(port)
}

/// Every (pid, fd) holding the socket with `inode`: the processes of the namespace whose
/// inode is `netns_ino` first (the proxy itself), then any other. An inode number alone is
/// no proof (sockfs numbers wrap; the table may be stale): each one taken is checked.
fn holders(inode: u64, netns_ino: Option<u64>) -> Vec<(i32, i32)> {
    let target = format!("socket:[{inode}]");
    let mut found: Vec<(bool, i32, i32)> = Vec::new();
    for proc in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = proc.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        let inside = std::fs::metadata(proc.path().join("ns/net"))
            .is_ok_and(|m| Some(std::os::unix::fs::MetadataExt::ino(&m)) == netns_ino);
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                if let Ok(n) = fd.file_name().to_string_lossy().parse::<i32>() {
                    found.push((!inside, pid, n));
                }
            }
        }
    }
    found.sort_unstable();
    found.into_iter().map(|(_, pid, fd)| (pid, fd)).collect()
}

/// Duplicates fd `fd` of process `pid` into this process (pidfd_open + pidfd_getfd).
fn take_fd(pid: i32, fd: i32) -> Option<OwnedFd> {
    use rustix::process::{pidfd_getfd, pidfd_open, Pid, PidfdFlags, PidfdGetfdFlags};
    // Pid 0 (no `Pid`): pidfd_open refused it too.
    let pidfd = pidfd_open(Pid::from_raw(pid)?, PidfdFlags::empty()).ok()?;
    pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()).ok()
}

/// Takes the socket a table of namespace `ns` lists as `found`, if it is that namespace's
/// TCP listener on `port` ([`check_listener`]). Returns it with its address family.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn take_listener(found: &Listening, ns: &NetnsHandle, port: u16) -> Option<(OwnedFd, u16)> {
    let netns = ns.path();
    for (pid, fd) in holders(found.inode, Some(ns.inode())) {
        let Some(sock) = take_fd(pid, fd) else {
            continue;
        };
        match check_listener(sock.as_fd(), ns.cookie(), port) {
            Ok(family) => return Some((sock, family)),
            Err(why) => tracing::warn!(
                inode = found.inode,
                pid,
                fd,
                netns = %netns.display(),
                port,
                reason = %why,
                "a socket found for the inbound listener is not adopted"
            ),
        }
    }
    None
}

/// Why a socket is not a namespace's inbound listener.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub enum NotAdoptable {
    /// It lives in another network namespace.
    #[error("it belongs to another network namespace (netns cookie {found}, not {want})")]
    OtherNamespace {
        /// The socket's netns cookie.
        found: NetnsCookie,
        /// The enrolled namespace's.
        want: NetnsCookie,
    },
    /// Not a TCP stream socket of AF_INET/AF_INET6.
    #[error("it is not a TCP socket (domain {domain}, type {kind}, protocol {protocol})")]
    NotTcp {
        /// SO_DOMAIN.
        domain: i32,
        /// SO_TYPE.
        kind: i32,
        /// SO_PROTOCOL.
        protocol: i32,
    },
    /// Not in LISTEN state.
    #[error("it is not listening")]
    NotListening,
    /// Bound to another port.
    #[error("it is bound to port {0}")]
    OtherPort(u16),
    /// A socket option could not be read.
    #[error("{option} cannot be read: {error}")]
    Unreadable {
        /// The option or call.
        option: &'static str,
        /// The errno.
        error: String,
    },
}

/// A socket option read through socket2, its failure named.
fn opt<T>(option: &'static str, got: std::io::Result<T>) -> Result<T, NotAdoptable> {
    got.map_err(|e| NotAdoptable::Unreadable {
        option,
        error: e.to_string(),
    })
}

/// Checks that `fd` is a TCP socket (IPv4 or IPv6) of netns `cookie`, listening, bound to
/// `port`; returns its address family.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn check_listener(
    fd: BorrowedFd<'_>,
    cookie: NetnsCookie,
    port: u16,
) -> Result<u16, NotAdoptable> {
    let found = crate::netns::socket_cookie_of_netns(fd).map_err(|e| NotAdoptable::Unreadable {
        option: "SO_NETNS_COOKIE",
        error: e.to_string(),
    })?;
    if found != cookie {
        return Err(NotAdoptable::OtherNamespace {
            found,
            want: cookie,
        });
    }
    let sock = socket2::SockRef::from(&fd);
    let domain = opt("SO_DOMAIN", sock.domain())?;
    let kind = opt("SO_TYPE", sock.r#type())?;
    let protocol = opt("SO_PROTOCOL", sock.protocol())?;
    let inet = domain == socket2::Domain::IPV4 || domain == socket2::Domain::IPV6;
    if !inet || kind != socket2::Type::STREAM || protocol != Some(socket2::Protocol::TCP) {
        return Err(NotAdoptable::NotTcp {
            domain: domain.into(),
            kind: kind.into(),
            protocol: protocol.map_or(0, Into::into),
        });
    }
    if !opt("SO_ACCEPTCONN", sock.is_listener())? {
        return Err(NotAdoptable::NotListening);
    }
    let bound = opt("getsockname", sock.local_addr())?
        .as_socket()
        .map_or(0, |a| a.port());
    if bound != port {
        return Err(NotAdoptable::OtherPort(bound));
    }
    Ok(if domain == socket2::Domain::IPV6 {
        AF_INET6
    } else {
        AF_INET
    })
}
