//! Connects upstream (optionally from a chosen source address) and copies both ways.
use std::{
    io,
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use tokio::{
    io::copy_bidirectional_with_sizes,
    net::{TcpSocket, TcpStream},
};

/// Copy buffer per direction: allocated once per connection and reused for every read.
const COPY_BUF: usize = 64 * 1024;

/// How forwarding ended.
#[derive(Debug)]
pub enum Outcome {
    /// Both directions finished: bytes up and down.
    Done(u64, u64),
    /// The upstream connect failed or timed out.
    ConnectFailed(io::Error),
    /// The copy ended with an error.
    StreamError(io::Error),
}

async fn connect(
    upstream: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> io::Result<TcpStream> {
    let socket = if upstream.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
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

/// Forwards `client` to `upstream`, binding `source` first when given.
pub async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Outcome {
    let mut server = match connect(upstream, source, timeout).await {
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
