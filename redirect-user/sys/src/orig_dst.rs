//! `SO_ORIGINAL_DST`: the destination a captured connection was sent to before capture (the
//! conntrack entry of iptables REDIRECT, or the answer of our BPF getsockopt hook), read the way
//! a transparent proxy reads it. The one reader in the workspace, and its one `unsafe`.
//!
//! IPv4: `getsockopt(SOL_IP, SO_ORIGINAL_DST)` fills a `sockaddr_in`; IPv6:
//! `getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)` fills a `sockaddr_in6`. Both options are 80.
use std::{
    io, mem,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
    os::fd::{AsFd, AsRawFd as _, BorrowedFd},
};

use nix::sys::socket::{getsockname, SockaddrStorage};

/// `SO_ORIGINAL_DST` (`linux/netfilter_ipv4.h`), at level `SOL_IP`.
pub const SO_ORIGINAL_DST: libc::c_int = 80;
/// `IP6T_SO_ORIGINAL_DST` (`linux/netfilter_ipv6/ip6_tables.h`), at level `SOL_IPV6`.
pub const IP6T_SO_ORIGINAL_DST: libc::c_int = 80;

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

/// Plain C socket addresses the kernel fills in: any bytes are a valid value.
trait CSockaddr: Copy {
    /// The all-zero value.
    const ZERO: Self;
}

impl CSockaddr for libc::sockaddr_in {
    const ZERO: Self = libc::sockaddr_in {
        sin_family: 0,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    };
}

impl CSockaddr for libc::sockaddr_in6 {
    const ZERO: Self = libc::sockaddr_in6 {
        sin6_family: 0,
        sin6_port: 0,
        sin6_flowinfo: 0,
        sin6_addr: libc::in6_addr { s6_addr: [0; 16] },
        sin6_scope_id: 0,
    };
}

/// `getsockopt(fd, level, name)` into a `T`; fails unless the kernel wrote a whole `T`.
fn getsockopt_addr<T: CSockaddr>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    call: &'static str,
) -> Result<T, Error> {
    let mut value = T::ZERO;
    let size = mem::size_of::<T>();
    let mut len = size as libc::socklen_t;
    // SAFETY: the one unsafe of the SO_ORIGINAL_DST readers. `value` is a live, exclusively
    // borrowed `T` of `len` bytes, so the kernel's write of at most `len` bytes stays inside
    // it, and `T` is a plain C struct (the `CSockaddr` impls) for which any bytes are a valid
    // value; `len` is a valid `socklen_t` the kernel updates; `fd` is open while borrowed.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::addr_of_mut!(value).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(Error::from_getsockopt(call, io::Error::last_os_error()));
    }
    if len as usize != size {
        return Err(Error::Failed {
            call,
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the kernel wrote {len} bytes, expected {size}"),
            ),
        });
    }
    Ok(value)
}

/// `getsockopt(SOL_IP, SO_ORIGINAL_DST)`.
pub fn ipv4(fd: impl AsFd) -> Result<SocketAddrV4, Error> {
    let raw: libc::sockaddr_in =
        getsockopt_addr(fd.as_fd(), libc::SOL_IP, SO_ORIGINAL_DST, CALL_V4)?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr)),
        u16::from_be(raw.sin_port),
    ))
}

/// `getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)`, as the kernel answers (a v4-mapped address
/// stays mapped; flow label and scope are dropped, as the proxy has always done).
pub fn ipv6(fd: impl AsFd) -> Result<SocketAddrV6, Error> {
    let raw: libc::sockaddr_in6 =
        getsockopt_addr(fd.as_fd(), libc::SOL_IPV6, IP6T_SO_ORIGINAL_DST, CALL_V6)?;
    Ok(SocketAddrV6::new(
        Ipv6Addr::from(raw.sin6_addr.s6_addr),
        u16::from_be(raw.sin6_port),
        0,
        0,
    ))
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
    let sa: SockaddrStorage = getsockname(fd.as_raw_fd()).map_err(|e| failed(e.into()))?;
    if let Some(v4) = sa.as_sockaddr_in() {
        return Ok(SocketAddr::V4(SocketAddrV4::from(*v4)));
    }
    if let Some(v6) = sa.as_sockaddr_in6() {
        return Ok(SocketAddr::V6(SocketAddrV6::from(*v6)));
    }
    Err(failed(io::Error::new(
        io::ErrorKind::InvalidInput,
        "not an IPv4 or IPv6 socket",
    )))
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
        assert_eq!((SO_ORIGINAL_DST, IP6T_SO_ORIGINAL_DST), (80, 80));
    }
}
