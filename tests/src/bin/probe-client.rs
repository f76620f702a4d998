//! probe-client: connects from a chosen cgroup, netns and uid/gid, sends a line, prints one
//! JSON `ClientResult` line (the echo server's answer parsed into an `Echo`).
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpStream},
    os::fd::AsRawFd as _,
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use nix::sys::socket::{
    bind, setsockopt, socket, sockopt::ReuseAddr, AddressFamily, SockFlag, SockType, SockaddrIn,
};
use redirect_testkit::probe::{ClientResult, Counts, Echo};
use redirect_tests::place::Place;

/// Connects to ADDR the way an application in a pod would.
#[derive(Debug, Parser)]
struct Args {
    /// Destination.
    #[arg(long)]
    connect: SocketAddr,
    /// Line to send.
    #[arg(long, default_value = "ping")]
    send: String,
    /// Where to run.
    #[command(flatten)]
    place: Place,
    /// Source port to bind (0.0.0.0:PORT, SO_REUSEADDR) before connecting.
    #[arg(long)]
    bind_port: Option<u16>,
    /// Wait this long after connecting before sending.
    #[arg(long)]
    hold_ms: Option<u64>,
    /// Send `GET / HTTP/1.1` and read the whole response instead of a line.
    #[arg(long)]
    http: bool,
    /// Sequential connections; above 1 only a summary line is printed.
    #[arg(long, default_value_t = 1)]
    count: u32,
}

fn connect(args: &Args) -> anyhow::Result<TcpStream> {
    let Some(port) = args.bind_port else {
        return TcpStream::connect_timeout(&args.connect, Duration::from_secs(5))
            .context("connect");
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .context("socket")?;
    setsockopt(&fd, ReuseAddr, &true).context("SO_REUSEADDR")?;
    bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, port)).context("bind")?;
    let SocketAddr::V4(v4) = args.connect else {
        anyhow::bail!("IPv4 only")
    };
    nix::sys::socket::connect(fd.as_raw_fd(), &SockaddrIn::from(v4)).context("connect")?;
    Ok(TcpStream::from(fd))
}

fn once(args: &Args) -> anyhow::Result<ClientResult> {
    let mut stream = connect(args)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let local = stream.local_addr()?;
    let peer = stream.peer_addr()?;
    if let Some(ms) = args.hold_ms {
        // Deliberate: the connection stays open (idle) this long, so that tests can hold
        // several at once; nothing is awaited.
        std::thread::sleep(Duration::from_millis(ms));
    }
    let mut result = ClientResult {
        ok: true,
        local: Some(local),
        peer: Some(peer),
        ..ClientResult::default()
    };
    if args.http {
        let req = format!(
            "GET / HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            args.connect
        );
        stream.write_all(req.as_bytes()).context("send")?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut &stream, &mut text).context("read response")?;
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
        result.status = Some(
            head.split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
        );
        result.body = Some(body.to_owned());
        return Ok(result);
    }
    stream
        .write_all(format!("{}\n", args.send).as_bytes())
        .context("send")?;
    let mut reply = String::new();
    let n = BufReader::new(&stream)
        .read_line(&mut reply)
        .context("read reply")?;
    result.reply_bytes = n as u64;
    result.reply = (n > 0)
        .then(|| serde_json::from_str::<Echo>(&reply))
        .transpose()
        .with_context(|| format!("the answer is not an echo: {reply:?}"))?;
    Ok(result)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    let result = if args.count <= 1 {
        once(&args).unwrap_or_else(|e| ClientResult::failed(format!("{e:#}")))
    } else {
        let (mut ok, mut failed, mut first_error) = (0u32, 0u32, None);
        for _ in 0..args.count {
            match once(&args) {
                Ok(_) => ok += 1,
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert(format!("{e:#}"));
                }
            }
        }
        ClientResult {
            ok: failed == 0,
            error: first_error,
            counts: Some(Counts { ok, failed }),
            ..ClientResult::default()
        }
    };
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
