//! `OrigDstAddr`: the destination a captured connection was originally sent to.
use std::{
    fmt,
    net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6},
};

use nix::sys::socket::{
    getsockopt,
    sockopt::{Ip6tOriginalDst, OriginalDst},
};
use tokio::net::TcpStream;

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
    /// Nothing (no NAT entry, no BPF answer): the connection was not redirected.
    #[error(
        "getsockopt(SO_ORIGINAL_DST): no original destination (connection was not redirected)"
    )]
    NotRedirected,
    /// Any other getsockopt failure.
    #[error("getsockopt(SO_ORIGINAL_DST)")]
    Sys(#[source] nix::Error),
}

fn map_err(e: nix::Error) -> OrigDstError {
    match e {
        nix::Error::ENOENT | nix::Error::ENOPROTOOPT => OrigDstError::NotRedirected,
        other => OrigDstError::Sys(other),
    }
}

fn v4(stream: &TcpStream) -> Result<SocketAddr, OrigDstError> {
    let raw = getsockopt(stream, OriginalDst).map_err(map_err)?;
    let ip = Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr));
    Ok(SocketAddr::V4(SocketAddrV4::new(
        ip,
        u16::from_be(raw.sin_port),
    )))
}

fn v6(stream: &TcpStream) -> Result<SocketAddr, OrigDstError> {
    let raw = getsockopt(stream, Ip6tOriginalDst).map_err(map_err)?;
    let ip = Ipv6Addr::from(raw.sin6_addr.s6_addr);
    let port = u16::from_be(raw.sin6_port);
    Ok(match ip.to_ipv4_mapped() {
        Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, port)),
        None => SocketAddr::V6(SocketAddrV6::new(ip, port, 0, 0)),
    })
}

/// Reads the original destination of an accepted socket: `(SOL_IP, SO_ORIGINAL_DST)` for IPv4
/// and v4-mapped peers, `(SOL_IPV6, IP6T_SO_ORIGINAL_DST)` for IPv6.
pub fn original_dst(stream: &TcpStream) -> Result<OrigDstAddr, OrigDstError> {
    let local = stream
        .local_addr()
        .map_err(|e| OrigDstError::Sys(nix::Error::from_raw(e.raw_os_error().unwrap_or(0))))?;
    let addr = match local {
        SocketAddr::V4(_) => v4(stream)?,
        SocketAddr::V6(l) if l.ip().to_ipv4_mapped().is_some() => {
            v4(stream).or_else(|_| v6(stream))?
        }
        SocketAddr::V6(_) => v6(stream)?,
    };
    Ok(OrigDstAddr(addr))
}
