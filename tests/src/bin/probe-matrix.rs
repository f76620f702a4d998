//! probe-matrix: runs TCP/UDP probes from one cgroup, netns and uid/gid and prints one JSON
//! `ProbeResult` line per probe (the listener's answer parsed into a `Landing`).
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{self, BufRead as _, BufReader, Write as _},
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpStream, UdpSocket},
    os::fd::{AsFd as _, AsRawFd as _},
    str::FromStr,
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use nix::{
    errno::Errno,
    poll::{poll, PollFd, PollFlags, PollTimeout},
    sys::socket::{
        bind, connect, getsockopt, socket, sockopt::SocketError, AddressFamily, SockFlag, SockType,
        SockaddrStorage,
    },
};
use redirect_sys::fold_v4_mapped;
use redirect_testkit::probe::{Landing, ProbeResult};
use redirect_tests::place::Place;

/// Runs PROBES in order; a failing probe never stops the rest.
#[derive(Debug, Parser)]
struct Args {
    /// Where to run.
    #[command(flatten)]
    place: Place,
    /// Connect and receive timeout per step.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    timeout_ms: u64,
    /// tcp:ADDR, tcp6:ADDR, tcpsrc:SRCIP:ADDR, udp:ADDR or udps:ADDR.
    #[arg(required = true)]
    probes: Vec<Probe>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// TCP from a socket of `dst`'s family, optionally bound to `src` first.
    Tcp {
        src: Option<IpAddr>,
        dst: SocketAddr,
    },
    /// Connected UDP.
    Udp(SocketAddr),
    /// Unconnected UDP (send_to / recv_from).
    Udps(SocketAddr),
}

#[derive(Debug, Clone)]
struct Probe {
    raw: String,
    kind: Kind,
}

impl FromStr for Probe {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let addr = |t: &str| {
            t.parse::<SocketAddr>()
                .map_err(|e| format!("{s}: bad address {t:?}: {e}"))
        };
        let (scheme, rest) = s
            .split_once(':')
            .ok_or_else(|| format!("{s}: expected KIND:ADDR"))?;
        let kind = match scheme {
            "tcp" => Kind::Tcp {
                src: None,
                dst: addr(rest)?,
            },
            "tcp6" => Kind::Tcp {
                src: None,
                dst: v4_mapped(addr(rest)?),
            },
            "tcpsrc" => {
                let (src, dst) = match rest.strip_prefix('[') {
                    Some(r) => r.split_once("]:"),
                    None => rest.split_once(':'),
                }
                .ok_or_else(|| format!("{s}: expected tcpsrc:SRCIP:ADDR"))?;
                let src = src
                    .parse::<IpAddr>()
                    .map_err(|e| format!("{s}: bad source {src:?}: {e}"))?;
                let (src, dst) = match (src, addr(dst)?) {
                    // Mixed families: dial from an AF_INET6 socket with the IPv4 side mapped.
                    (IpAddr::V4(ip), dst @ SocketAddr::V6(_)) => (ip.to_ipv6_mapped().into(), dst),
                    (src @ IpAddr::V6(_), dst) => (src, v4_mapped(dst)),
                    (src, dst) => (src, dst),
                };
                Kind::Tcp {
                    src: Some(src),
                    dst,
                }
            }
            "udp" => Kind::Udp(addr(rest)?),
            "udps" => Kind::Udps(addr(rest)?),
            other => return Err(format!("{s}: unknown probe kind {other:?}")),
        };
        Ok(Self {
            raw: s.to_owned(),
            kind,
        })
    }
}

/// Turns an IPv4 address into its IPv4-mapped IPv6 form so it is dialled from an AF_INET6 socket.
fn v4_mapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(v4) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        v6 => v6,
    }
}

/// A short, stable name for why a probe failed.
fn classify(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "refused".into(),
        Some(libc::ETIMEDOUT | libc::EAGAIN) => "timeout".into(),
        Some(libc::EHOSTUNREACH | libc::ENETUNREACH) => "unreachable".into(),
        Some(libc::ECONNRESET | libc::EPIPE | libc::ECONNABORTED) => "reset".into(),
        _ => match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => "timeout".into(),
            io::ErrorKind::UnexpectedEof => "reset".into(),
            kind => format!("other:{kind:?}"),
        },
    }
}

/// Non-blocking connect bounded by `timeout`, optionally binding to `src` first.
fn tcp_connect(src: Option<IpAddr>, dst: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    let family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket(family, SockType::Stream, flags, None)?;
    if let Some(ip) = src {
        bind(
            fd.as_raw_fd(),
            &SockaddrStorage::from(SocketAddr::new(ip, 0)),
        )?;
    }
    match connect(fd.as_raw_fd(), &SockaddrStorage::from(dst)) {
        Ok(()) => {}
        Err(Errno::EINPROGRESS) => {
            let wait = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLOUT)];
            if poll(&mut fds, wait)? == 0 {
                return Err(io::ErrorKind::TimedOut.into());
            }
            let err = getsockopt(&fd, SocketError)?;
            if err != 0 {
                return Err(io::Error::from_raw_os_error(err));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// First line of `bytes`, trimmed, lossily decoded.
fn first_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.lines().next().unwrap_or("").trim().to_owned()
}

fn tcp_exchange(stream: &TcpStream, timeout: Duration) -> io::Result<String> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut writer = stream;
    writer.write_all(b"probe\n")?;
    let mut line = Vec::new();
    BufReader::new(stream).read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(first_line(&line))
}

fn unspecified(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// One probe's run: the peer it talked to and its own address (if known), and the reply or
/// error.
type Run = (Option<SocketAddr>, Option<SocketAddr>, io::Result<String>);

/// Runs one probe.
fn run(kind: &Kind, timeout: Duration) -> Run {
    let mut buf = [0u8; 2048];
    match *kind {
        Kind::Tcp { src, dst } => match tcp_connect(src, dst, timeout) {
            Ok(stream) => (
                stream.peer_addr().ok(),
                stream.local_addr().ok(),
                tcp_exchange(&stream, timeout),
            ),
            Err(e) => (None, None, Err(e)),
        },
        Kind::Udp(dst) => {
            let mut peer = None;
            let result = (|| {
                let sock = UdpSocket::bind(unspecified(dst))?;
                sock.connect(dst)?;
                peer = sock.peer_addr().ok();
                sock.set_read_timeout(Some(timeout))?;
                sock.send(b"probe\n")?;
                let n = sock.recv(&mut buf)?;
                Ok(first_line(&buf[..n]))
            })();
            (peer, None, result)
        }
        Kind::Udps(dst) => {
            let mut peer = None;
            let result = (|| {
                let sock = UdpSocket::bind(unspecified(dst))?;
                sock.set_read_timeout(Some(timeout))?;
                sock.send_to(b"probe\n", dst)?;
                let (n, from) = sock.recv_from(&mut buf)?;
                peer = Some(from);
                Ok(first_line(&buf[..n]))
            })();
            (peer, None, result)
        }
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut out = io::stdout().lock();
    for probe in &args.probes {
        let (peer, local, result) = run(&probe.kind, timeout);
        let landing = match &result {
            Ok(reply) => {
                serde_json::from_str::<Landing>(reply).map_err(|_| format!("bad-reply:{reply}"))
            }
            Err(e) => Err(classify(e)),
        };
        let line = ProbeResult {
            probe: probe.raw.clone(),
            ok: landing.is_ok(),
            peer: peer.map(fold_v4_mapped),
            error: landing.as_ref().err().cloned(),
            landing: landing.ok(),
            local: local.map(fold_v4_mapped),
        };
        writeln!(out, "{}", serde_json::to_string(&line)?).context("print result")?;
        out.flush().context("flush stdout")?;
    }
    Ok(())
}
