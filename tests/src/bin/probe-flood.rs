//! probe-flood: what a hostile pod does to the per-connection state, and what its neighbour
//! checks, in a chosen cgroup, netns and uid:
//! - `--udp ADDR --count N`: N unconnected UDP sockets, each sends one datagram to ADDR (a DNS
//!   server the policy captures) and closes; prints `done N`.
//! - `--hold-tcp ADDR --count N`: N non-blocking connects to ADDR kept open (in `SYN_SENT` when
//!   the proxy's accept queue is full); prints `holding N` and waits to be killed.
//! - `--stuck-listen PORT`: listens on 0.0.0.0:PORT with a backlog of 1 and never accepts;
//!   prints `listening` and waits to be killed.
//! - `--victim-dns ADDR --victim-tcp ADDR`: sends one datagram to the DNS server and connects
//!   to the TCP destination, prints `ready`, waits until the file `--go` exists (the flood runs
//!   meanwhile), and prints `dns-from=SRC tcp-peer=PEER tcp-landing=LANDING`.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpStream, UdpSocket},
    os::fd::{AsRawFd as _, OwnedFd},
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use nix::sys::socket::{
    bind, connect, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn, SockaddrStorage,
};
use redirect_tests::place::Place;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    place: Place,
    /// Churn unconnected UDP sockets sending to this address.
    #[arg(long)]
    udp: Option<SocketAddr>,
    /// Hold this many non-blocking TCP connects to this address.
    #[arg(long)]
    hold_tcp: Option<SocketAddr>,
    /// How many sockets (`--udp`, `--hold-tcp`).
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Threads churning at once (`--udp`).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Listen on 0.0.0.0:PORT and never accept.
    #[arg(long)]
    stuck_listen: Option<u16>,
    /// The neighbour's DNS server.
    #[arg(long, requires = "victim_tcp")]
    victim_dns: Option<SocketAddr>,
    /// The neighbour's TCP destination.
    #[arg(long, requires = "victim_dns")]
    victim_tcp: Option<SocketAddr>,
    /// The victim reads its answers once this file exists.
    #[arg(long, requires = "victim_dns")]
    go: Option<std::path::PathBuf>,
}

fn churn_udp(dst: SocketAddr, count: usize) -> anyhow::Result<usize> {
    let any: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    for _ in 0..count {
        let s = UdpSocket::bind(any).context("udp bind")?;
        s.send_to(b"flood", dst).context("udp send_to")?;
    }
    Ok(count)
}

fn hold_tcp(dst: SocketAddr, count: usize) -> anyhow::Result<Vec<OwnedFd>> {
    let SocketAddr::V4(v4) = dst else {
        anyhow::bail!("--hold-tcp takes an IPv4 address")
    };
    let mut held = Vec::with_capacity(count);
    for _ in 0..count {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("socket")?;
        match connect(fd.as_raw_fd(), &SockaddrIn::from(v4)) {
            Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => held.push(fd),
            Err(e) => return Err(e).context("connect"),
        }
    }
    Ok(held)
}

fn stuck_listener(port: u16) -> anyhow::Result<OwnedFd> {
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("socket")?;
    setsockopt(&fd, sockopt::ReuseAddr, &true).context("SO_REUSEADDR")?;
    bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, port)).context("bind")?;
    listen(&fd, Backlog::new(1).context("backlog")?).context("listen")?;
    Ok(fd)
}

/// Waits to be killed (the test ends this process by pid).
fn park() -> ! {
    loop {
        std::thread::park();
    }
}

fn victim(dns: SocketAddr, tcp: SocketAddr, go: &std::path::Path) -> anyhow::Result<()> {
    let any: SocketAddr = if dns.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let udp = UdpSocket::bind(any).context("udp bind")?;
    udp.set_read_timeout(Some(Duration::from_secs(10)))?;
    udp.send_to(b"query", dns).context("udp send_to")?;
    let mut stream = TcpStream::connect_timeout(&tcp, Duration::from_secs(5)).context("connect")?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    println!("ready");
    std::io::stdout().flush()?;
    // Polls the test's go-ahead (a file it creates once the flood is over).
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while !go.exists() {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "no {} within 600 s",
            go.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Both answers are read only now, after the neighbour's flood: the reply's source comes
    // from this socket's state as it is now (recvmsg), and so does the TCP peer (getpeername).
    let mut buf = [0u8; 2048];
    let (_, from) = udp.recv_from(&mut buf).context("udp recv_from")?;
    let peer: SockaddrStorage =
        nix::sys::socket::getpeername(stream.as_raw_fd()).context("getpeername")?;
    stream.write_all(b"ping\n")?;
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply)?;
    println!(
        "dns-from={from} tcp-peer={} tcp-landing={}",
        peer,
        reply.trim()
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    if let (Some(dns), Some(tcp)) = (args.victim_dns, args.victim_tcp) {
        let go = args.go.context("--victim-dns needs --go FILE")?;
        return victim(dns, tcp, &go);
    }
    if let Some(port) = args.stuck_listen {
        let _l = stuck_listener(port)?;
        println!("listening");
        std::io::stdout().flush()?;
        park();
    }
    if let Some(dst) = args.hold_tcp {
        let held = hold_tcp(dst, args.count)?;
        println!("holding {}", held.len());
        std::io::stdout().flush()?;
        park();
    }
    let Some(dst) = args.udp else {
        anyhow::bail!("one of --udp, --hold-tcp, --stuck-listen or --victim-dns is needed")
    };
    let per = args.count.div_ceil(args.threads.max(1));
    let threads: Vec<_> = (0..args.threads.max(1))
        .map(|_| std::thread::spawn(move || churn_udp(dst, per)))
        .collect();
    let mut done = 0;
    for t in threads {
        done += t
            .join()
            .map_err(|_| anyhow::anyhow!("a churn thread panicked"))??;
    }
    println!("done {done}");
    Ok(())
}
