//! `OrigDstAddr`: the destination a captured connection was originally sent to.
use std::{
    fmt,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    os::fd::AsFd,
};

use nix::sys::socket::{getsockopt, sockopt::OriginalDst};

/// The original destination of a redirected connection, as `SO_ORIGINAL_DST` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrigDstAddr(pub SocketAddr);

impl fmt::Display for OrigDstAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why the original destination could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OrigDstError {
    /// The kernel (and our BPF hook) had no original destination: the connection was not
    /// redirected, e.g. a client dialled the proxy port directly.
    #[error("getsockopt(SOL_IP, SO_ORIGINAL_DST): no original destination (connection was not redirected)")]
    NotRedirected,
    /// Any other getsockopt failure.
    #[error("getsockopt(SOL_IP, SO_ORIGINAL_DST)")]
    Sys(#[source] nix::Error),
    /// The answer was not an IPv4 sockaddr.
    #[error("getsockopt(SOL_IP, SO_ORIGINAL_DST) returned address family {0}, expected AF_INET")]
    Family(u16),
}

/// Reads `SO_ORIGINAL_DST` from an accepted socket.
pub fn original_dst<S: AsFd>(socket: &S) -> Result<OrigDstAddr, OrigDstError> {
    let raw = getsockopt(socket, OriginalDst).map_err(|e| match e {
        nix::Error::ENOENT => OrigDstError::NotRedirected,
        other => OrigDstError::Sys(other),
    })?;
    if i32::from(raw.sin_family) != nix::libc::AF_INET {
        return Err(OrigDstError::Family(raw.sin_family));
    }
    let ip = Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr));
    let port = u16::from_be(raw.sin_port);
    Ok(OrigDstAddr(SocketAddr::V4(SocketAddrV4::new(ip, port))))
}
