//! A small listener builder: bind a TCP (or UDP) socket on an address, inside a given network
//! namespace when asked: `Listen::on("127.0.0.1:15001").netns(&ns).tcp()`.
use std::{
    net::{SocketAddr, TcpListener, UdpSocket},
    os::fd::{AsRawFd as _, OwnedFd},
    path::PathBuf,
};

use anyhow::Context as _;
use nix::sys::socket::{
    bind, listen, setsockopt, socket,
    sockopt::{Ipv6V6Only, ReuseAddr},
    AddressFamily, Backlog, SockFlag, SockType, SockaddrStorage,
};

use crate::netns::{in_netns, Netns};

/// What to bind and where; sockets are close-on-exec, `[::]` is dual-stack.
#[derive(Debug, Clone)]
pub struct Listen {
    addr: Result<SocketAddr, String>,
    netns: Option<PathBuf>,
    reuse_addr: bool,
    backlog: i32,
}

impl Listen {
    /// Binds `addr` (parsed when binding, so a bad address fails there, named).
    pub fn on(addr: &str) -> Self {
        Self::on_addr(
            addr.parse()
                .map_err(|e| format!("listen address {addr:?}: {e}")),
        )
    }

    /// Binds `addr`.
    pub fn at(addr: SocketAddr) -> Self {
        Self::on_addr(Ok(addr))
    }

    fn on_addr(addr: Result<SocketAddr, String>) -> Self {
        Self {
            addr,
            netns: None,
            reuse_addr: false,
            backlog: 128,
        }
    }

    /// Creates the socket inside `ns` (it stays there wherever it is used).
    pub fn netns(self, ns: &Netns) -> Self {
        self.netns_path(ns.path())
    }

    /// Same, for a namespace file (e.g. `/proc/PID/ns/net`).
    pub fn netns_path(mut self, path: PathBuf) -> Self {
        self.netns = Some(path);
        self
    }

    /// Sets `SO_REUSEADDR` before binding.
    pub fn reuse_addr(mut self) -> Self {
        self.reuse_addr = true;
        self
    }

    /// A listening TCP socket.
    pub fn tcp(&self) -> anyhow::Result<TcpListener> {
        // nix takes a backlog below the libc's SOMAXCONN only: musl's is 128 (glibc's 4096),
        // so a larger one is SOMAXCONN itself (the kernel caps it at net.core.somaxconn).
        let backlog = if self.backlog >= Backlog::MAXCONN.into() {
            Backlog::MAXCONN
        } else {
            Backlog::new(self.backlog).context("backlog")?
        };
        let fd = self.bound(SockType::Stream, move |fd| {
            listen(fd, backlog).context("listen")
        })?;
        Ok(TcpListener::from(fd))
    }

    /// A bound UDP socket.
    pub fn udp(&self) -> anyhow::Result<UdpSocket> {
        Ok(UdpSocket::from(self.bound(SockType::Datagram, |_| Ok(()))?))
    }

    fn bound(
        &self,
        ty: SockType,
        then: impl FnOnce(&OwnedFd) -> anyhow::Result<()> + Send + 'static,
    ) -> anyhow::Result<OwnedFd> {
        let addr = self.addr.clone().map_err(anyhow::Error::msg)?;
        let reuse = self.reuse_addr;
        let make = move || -> anyhow::Result<OwnedFd> {
            let fd = bound_socket(addr, ty, reuse)?;
            then(&fd).with_context(|| format!("on {addr}"))?;
            Ok(fd)
        };
        match &self.netns {
            Some(path) => in_netns(path, make)
                .and_then(|r| r)
                .with_context(|| format!("in {}", path.display())),
            None => make(),
        }
    }
}

/// Creates, configures and binds a socket for `addr`.
fn bound_socket(addr: SocketAddr, ty: SockType, reuse: bool) -> anyhow::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, ty, SockFlag::SOCK_CLOEXEC, None).context("socket")?;
    if reuse {
        setsockopt(&fd, ReuseAddr, &true).context("SO_REUSEADDR")?;
    }
    if matches!(addr, SocketAddr::V6(v6) if v6.ip().is_unspecified()) {
        setsockopt(&fd, Ipv6V6Only, &false).context("IPV6_V6ONLY")?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).with_context(|| format!("bind {addr}"))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;

    use super::*;

    #[test]
    fn binds_tcp_and_udp_on_loopback() {
        let l = Listen::on("127.0.0.1:0").reuse_addr().tcp().expect("tcp");
        let addr = l.local_addr().expect("addr");
        TcpStream::connect(addr).expect("connect");
        let u = Listen::on("127.0.0.1:0").udp().expect("udp");
        assert!(u.local_addr().expect("addr").port() > 0);
    }

    #[test]
    fn a_bad_address_or_a_taken_port_is_named() {
        let e = Listen::on("nope").tcp().expect_err("bad address");
        assert!(format!("{e:#}").contains("\"nope\""), "{e:#}");
        let taken = Listen::on("127.0.0.1:0").tcp().expect("tcp");
        let addr = taken.local_addr().expect("addr");
        let e = Listen::at(addr).tcp().expect_err("taken");
        assert!(format!("{e:#}").contains(&format!("bind {addr}")), "{e:#}");
    }
}
