//! `SO_ORIGINAL_DST`: the destination a captured connection was sent to before capture (the
//! conntrack entry of iptables REDIRECT, or the answer of our BPF getsockopt hook), read the way
//! a transparent proxy reads it. The one reader in the workspace, on socket2's
//! `original_dst_v4`/`original_dst_v6` (no `unsafe` of its own).
//!
//! IPv4: `getsockopt(SOL_IP, SO_ORIGINAL_DST)` fills a `sockaddr_in`; IPv6:
//! `getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)` fills a `sockaddr_in6`. Both options are 80.
use std::{
    io,
    net::{SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsFd, BorrowedFd},
};

use socket2::{SockAddr, SockRef};

const CALL_V4: &str = "getsockopt(SOL_IP, SO_ORIGINAL_DST)";
const CALL_V6: &str = "getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)";
const CALL_LOCAL: &str = "getsockname";

/// Why the original destination could not be read; names the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel has none (no NAT entry, no BPF answer): the connection was not redirected.
    #[error("{call}: no original destination (the connection was not redirected)")]
    NotRedirected {
        /// The call, e.g. `getsockopt(SOL_IP, SO_ORIGINAL_DST)`.
        call: &'static str,
        /// The kernel's error (ENOENT or ENOPROTOOPT).
        #[source]
        source: io::Error,
    },
    /// Any other failure.
    #[error("{call}")]
    Failed {
        /// The call that failed.
        call: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl Error {
    fn from_getsockopt(call: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOENT | libc::ENOPROTOOPT) => Self::NotRedirected { call, source },
            _ => Self::Failed { call, source },
        }
    }

    /// The call that failed.
    pub fn call(&self) -> &'static str {
        match self {
            Self::NotRedirected { call, .. } | Self::Failed { call, .. } => call,
        }
    }

    /// The kernel's errno, when the kernel refused.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::NotRedirected { source, .. } | Self::Failed { source, .. } => {
                source.raw_os_error()
            }
        }
    }

    /// True when the connection simply was not redirected.
    pub fn is_not_redirected(&self) -> bool {
        matches!(self, Self::NotRedirected { .. })
    }
}

/// What the kernel answered, as a socket address of the family `call` asks for.
fn answered(call: &'static str, got: io::Result<SockAddr>) -> Result<SocketAddr, Error> {
    let addr = got.map_err(|e| Error::from_getsockopt(call, e))?;
    addr.as_socket().ok_or_else(|| Error::Failed {
        call,
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the kernel answered address family {}", addr.family()),
        ),
    })
}

/// `getsockopt(SOL_IP, SO_ORIGINAL_DST)`.
pub fn ipv4(fd: impl AsFd) -> Result<SocketAddrV4, Error> {
    let fd = fd.as_fd();
    match answered(CALL_V4, SockRef::from(&fd).original_dst_v4())? {
        SocketAddr::V4(a) => Ok(a),
        other => Err(Error::Failed {
            call: CALL_V4,
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel answered {other}, not an IPv4 address"),
            ),
        }),
    }
}

/// `getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)`, as the kernel answers (a v4-mapped address
/// stays mapped; flow label and scope are dropped, as the proxy has always done).
pub(crate) fn ipv6(fd: impl AsFd) -> Result<SocketAddrV6, Error> {
    let fd = fd.as_fd();
    match answered(CALL_V6, SockRef::from(&fd).original_dst_v6())? {
        SocketAddr::V6(a) => Ok(SocketAddrV6::new(*a.ip(), a.port(), 0, 0)),
        other => Err(Error::Failed {
            call: CALL_V6,
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel answered {other}, not an IPv6 address"),
            ),
        }),
    }
}

/// `addr` with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) shown as the IPv4 it maps.
pub fn fold_v4_mapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(ip) => SocketAddr::V4(SocketAddrV4::new(ip, v6.port())),
            None => addr,
        },
        v4 @ SocketAddr::V4(_) => v4,
    }
}

/// The local address of `fd` (`getsockname`), IPv4 or IPv6.
fn local_addr(fd: BorrowedFd<'_>) -> Result<SocketAddr, Error> {
    let failed = |source| Error::Failed {
        call: CALL_LOCAL,
        source,
    };
    let addr = SockRef::from(&fd).local_addr().map_err(failed)?;
    addr.as_socket().ok_or_else(|| {
        failed(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not an IPv4 or IPv6 socket",
        ))
    })
}

/// The original destination of an accepted TCP socket, as a transparent proxy reads it:
/// IPv4 sockets ask `SOL_IP`; IPv6 sockets with a v4-mapped local address (a dual-stack
/// listener that accepted IPv4) ask `SOL_IP`, then `SOL_IPV6`; native IPv6 asks `SOL_IPV6`.
/// A v4-mapped answer is folded to IPv4 (the proxy dials and logs plain IPv4).
pub fn original_dst(fd: impl AsFd) -> Result<SocketAddr, Error> {
    let fd = fd.as_fd();
    let addr = match local_addr(fd)? {
        SocketAddr::V4(_) => SocketAddr::V4(ipv4(fd)?),
        SocketAddr::V6(l) if l.ip().to_ipv4_mapped().is_some() => match ipv4(fd) {
            Ok(v4) => SocketAddr::V4(v4),
            Err(_) => SocketAddr::V6(ipv6(fd)?),
        },
        SocketAddr::V6(_) => SocketAddr::V6(ipv6(fd)?),
    };
    Ok(fold_v4_mapped(addr))
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// An accepted socket of a plain (never redirected) loopback connection.
    fn accepted(addr: &str) -> Option<(TcpStream, TcpStream)> {
        let listener = TcpListener::bind(addr).ok()?;
        let client = TcpStream::connect(listener.local_addr().ok()?).ok()?;
        let (server, _) = listener.accept().ok()?;
        Some((client, server))
    }

    #[test]
    fn a_plain_ipv4_connection_was_not_redirected_and_the_call_is_named() {
        let (_client, server) = accepted("127.0.0.1:0").expect("loopback connection");
        let e = original_dst(&server).expect_err("nothing redirected it");
        assert!(e.is_not_redirected(), "{e:?}");
        assert_eq!(e.call(), CALL_V4);
        assert!(e
            .to_string()
            .starts_with("getsockopt(SOL_IP, SO_ORIGINAL_DST): "));
        assert!(matches!(
            e.raw_os_error(),
            Some(libc::ENOENT | libc::ENOPROTOOPT)
        ));
    }

    #[test]
    fn a_plain_ipv6_connection_asks_sol_ipv6() {
        let Some((_client, server)) = accepted("[::1]:0") else {
            eprintln!("no IPv6 loopback here: nothing to check");
            return;
        };
        let e = original_dst(&server).expect_err("nothing redirected it");
        assert!(e.is_not_redirected(), "{e:?}");
        assert_eq!(e.call(), CALL_V6);
        assert!(ipv6(&server).is_err());
    }

    #[test]
    fn a_socket_without_an_ip_address_is_refused_by_name() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
        let e = original_dst(&a).expect_err("unix socket");
        assert_eq!(e.call(), CALL_LOCAL, "{e:?}");
        assert!(!e.is_not_redirected());
    }

    #[test]
    fn v4_mapped_addresses_fold_to_ipv4_and_others_stay() {
        let mapped: SocketAddr = "[::ffff:198.18.0.2]:8080".parse().expect("addr");
        assert_eq!(
            fold_v4_mapped(mapped),
            "198.18.0.2:8080".parse().expect("addr")
        );
        for same in ["[2001:db8::1]:80", "10.0.0.1:1", "[::1]:15001"] {
            let a: SocketAddr = same.parse().expect("addr");
            assert_eq!(fold_v4_mapped(a), a);
        }
    }

    #[test]
    fn both_options_are_80_as_in_the_kernel_headers() {
        assert_eq!(
            (libc::SO_ORIGINAL_DST, libc::IP6T_SO_ORIGINAL_DST),
            (80, 80)
        );
    }
}
