//! `OrigDstAddr`: the destination a captured connection was originally sent to, read with
//! the workspace's one `SO_ORIGINAL_DST` reader (`redirect_sys::original_dst`).
use std::{fmt, net::SocketAddr};

pub(crate) use redirect_sys::OrigDstError;
use tokio::net::TcpStream;

/// The original destination of a redirected connection, as `SO_ORIGINAL_DST` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrigDstAddr(pub SocketAddr);

impl fmt::Display for OrigDstAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Reads the original destination of an accepted socket: `(SOL_IP, SO_ORIGINAL_DST)` for IPv4
/// and v4-mapped peers, `(SOL_IPV6, IP6T_SO_ORIGINAL_DST)` for IPv6; v4-mapped answers are
/// folded to IPv4.
pub(crate) fn original_dst(stream: &TcpStream) -> Result<OrigDstAddr, OrigDstError> {
    redirect_sys::original_dst(stream).map(OrigDstAddr)
}
