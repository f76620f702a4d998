//! Connects upstream (optionally from a chosen source address) and copies both ways.
use std::{
    io,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use std::os::fd::AsFd;
use tokio::{
    io::copy_bidirectional_with_sizes,
    net::{TcpSocket, TcpStream},
};

/// Copy buffer per direction: allocated once per connection and reused for every read.
const COPY_BUF: usize = 64 * 1024;

/// How forwarding ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Both directions finished: bytes up and down.
    Done(u64, u64),
    /// The upstream connect failed or timed out.
    ConnectFailed(io::Error),
    /// The copy ended with an error.
    StreamError(io::Error),
}

/// Makes `socket` transparent (it may bind and answer for an address that is not local:
/// `IP_TRANSPARENT`, which also covers IPv6 sockets) and marks it `mark` when given.
fn transparent(socket: &impl AsFd, mark: Option<u32>) -> io::Result<()> {
    // socket2 (rustix has neither option); SOL_IP's IP_TRANSPARENT on an IPv6 socket too.
    let socket = socket2::SockRef::from(socket);
    sockopt_io(socket.set_ip_transparent_v4(true), "IP_TRANSPARENT")?;
    if let Some(mark) = mark {
        sockopt_io(socket.set_mark(mark), "SO_MARK")?;
    }
    Ok(())
}

fn sockopt_io(r: io::Result<()>, what: &str) -> io::Result<()> {
    r.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("setsockopt {what}: {e} (TPROXY mode needs CAP_NET_ADMIN)"),
        )
    })
}

/// A transparent listener on `addr` (TPROXY mode's inbound listener: iptables' TPROXY target
/// hands connections only to transparent sockets).
pub fn bind_transparent(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    transparent(&socket, None)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

async fn connect(
    upstream: SocketAddr,
    source: Option<IpAddr>,
    mark: Option<u32>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = if upstream.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if mark.is_some() {
        transparent(&socket, mark)?;
    }
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    match tokio::time::timeout(timeout, socket.connect(upstream)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "upstream connect timed out",
        )),
    }
}

/// Forwards `client` to `upstream`, binding `source` first when given (transparent and marked
/// with `mark`, TPROXY mode).
pub(crate) async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    source: Option<IpAddr>,
    mark: Option<u32>,
    timeout: Duration,
) -> Outcome {
    let mut server = match connect(upstream, source, mark, timeout).await {
        Ok(s) => s,
        Err(e) => return Outcome::ConnectFailed(e),
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    match copy_bidirectional_with_sizes(&mut client, &mut server, COPY_BUF, COPY_BUF).await {
        Ok((up, down)) => Outcome::Done(up, down),
        Err(e) => Outcome::StreamError(e),
    }
}
