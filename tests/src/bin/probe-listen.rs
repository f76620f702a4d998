//! probe-listen: binds TCP/UDP listeners in a chosen cgroup and netns and echoes what each connection looked like.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream, UdpSocket},
    os::fd::{AsRawFd as _, OwnedFd},
    str::FromStr,
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use nix::sys::socket::{
    bind, getsockopt, listen, setsockopt, socket,
    sockopt::{Ip6tOriginalDst, Ipv6V6Only, OriginalDst, ReuseAddr},
    AddressFamily, Backlog, SockFlag, SockType, SockaddrIn, SockaddrIn6, SockaddrStorage,
};
use redirect_tests::place::{unmap, Place};
use serde_json::json;

/// Binds every --tcp/--udp address, prints `ready`, then answers forever.
#[derive(Debug, Parser)]
struct Args {
    /// Where to run.
    #[command(flatten)]
    place: Place,
    /// Tag included in every reply.
    #[arg(long)]
    name: String,
    /// TCP listen address (repeatable).
    #[arg(long)]
    tcp: Vec<Listen>,
    /// UDP listen address (repeatable).
    #[arg(long)]
    udp: Vec<Listen>,
}

/// A listen address plus the text it was given as.
#[derive(Debug, Clone)]
struct Listen {
    raw: String,
    addr: SocketAddr,
}

impl FromStr for Listen {
    type Err = std::net::AddrParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self {
            raw: s.to_owned(),
            addr: s.parse()?,
        })
    }
}

/// Creates, configures and binds a socket for `addr`.
fn bound_socket(addr: SocketAddr, ty: SockType) -> anyhow::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, ty, SockFlag::SOCK_CLOEXEC, None).context("socket")?;
    setsockopt(&fd, ReuseAddr, &true).context("SO_REUSEADDR")?;
    if matches!(addr, SocketAddr::V6(v6) if v6.ip().is_unspecified()) {
        setsockopt(&fd, Ipv6V6Only, &false).context("IPV6_V6ONLY")?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).with_context(|| format!("bind {addr}"))?;
    Ok(fd)
}

/// The destination a transparent proxy would forward to, or the local address if none was recorded.
fn original_dst(stream: &TcpStream, local: SocketAddr) -> SocketAddr {
    let native_v6 = matches!(local, SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_none());
    let orig = if native_v6 {
        getsockopt(stream, Ip6tOriginalDst)
            .ok()
            .map(|sa| SocketAddr::V6(SocketAddrV6::from(SockaddrIn6::from(sa))))
    } else {
        getsockopt(stream, OriginalDst)
            .ok()
            .map(|sa| SocketAddr::V4(SocketAddrV4::from(SockaddrIn::from(sa))))
    };
    unmap(orig.unwrap_or(local))
}

fn serve_conn(tag: &str, stream: TcpStream) -> anyhow::Result<()> {
    let local = stream.local_addr().context("local_addr")?;
    let peer = unmap(stream.peer_addr().context("peer_addr")?);
    let orig = original_dst(&stream, local);
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .context("set_read_timeout")?;
    let mut line = String::new();
    // The reply is sent even when the client sends nothing before the timeout.
    let _ = BufReader::new(&stream).read_line(&mut line);
    let reply = format!("at={tag} orig={orig} peer={peer}\n");
    (&stream).write_all(reply.as_bytes()).context("write")?;
    Ok(())
}

fn serve_tcp(tag: String, listener: TcpListener) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let tag = tag.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve_conn(&tag, stream) {
                        eprintln!("probe-listen {tag}: {e:#}");
                    }
                });
            }
            Err(e) => eprintln!("probe-listen {tag}: accept: {e}"),
        }
    }
}

fn serve_udp(tag: String, socket: UdpSocket) {
    let mut buf = vec![0u8; 65536];
    loop {
        match socket.recv_from(&mut buf) {
            Ok((_, from)) => {
                let reply = format!("at={tag} from={}\n", unmap(from));
                if let Err(e) = socket.send_to(reply.as_bytes(), from) {
                    eprintln!("probe-listen {tag}: send_to {from}: {e}");
                }
            }
            Err(e) => eprintln!("probe-listen {tag}: recv_from: {e}"),
        }
    }
}

/// Enters the cgroup and netns, then binds everything.
/// A bound socket and the `NAME/LISTEN_ADDR` tag it answers with.
#[derive(Debug)]
enum Bound {
    Tcp(String, TcpListener),
    Udp(String, UdpSocket),
}

fn setup(args: &Args) -> anyhow::Result<Vec<Bound>> {
    args.place.enter()?;
    let mut bound = Vec::new();
    for l in &args.tcp {
        let fd =
            bound_socket(l.addr, SockType::Stream).with_context(|| format!("tcp {}", l.raw))?;
        listen(&fd, Backlog::new(128).context("backlog")?)
            .with_context(|| format!("listen tcp {}", l.raw))?;
        bound.push(Bound::Tcp(
            format!("{}/{}", args.name, l.raw),
            TcpListener::from(fd),
        ));
    }
    for l in &args.udp {
        let fd =
            bound_socket(l.addr, SockType::Datagram).with_context(|| format!("udp {}", l.raw))?;
        bound.push(Bound::Udp(
            format!("{}/{}", args.name, l.raw),
            UdpSocket::from(fd),
        ));
    }
    Ok(bound)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bound = match setup(&args) {
        Ok(bound) => bound,
        Err(e) => {
            println!("{}", json!({"error": format!("{e:#}")}));
            std::process::exit(1);
        }
    };
    for b in bound {
        match b {
            Bound::Tcp(tag, listener) => std::thread::spawn(move || serve_tcp(tag, listener)),
            Bound::Udp(tag, socket) => std::thread::spawn(move || serve_udp(tag, socket)),
        };
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").context("print ready")?;
    out.flush().context("flush stdout")?;
    drop(out);
    loop {
        std::thread::park();
    }
}
