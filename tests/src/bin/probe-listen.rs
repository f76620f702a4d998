//! probe-listen: binds TCP/UDP listeners in a chosen cgroup and netns and answers each
//! connection (or datagram) with one JSON `Landing` line: which listener took it, the original
//! destination it read and the peer it saw.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener, TcpStream, UdpSocket},
    str::FromStr,
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use redirect_sys::{fold_v4_mapped, original_dst};
use redirect_testkit::{probe::Landing, Listen as Bind};
use redirect_tests::place::Place;

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

/// One JSON line.
fn json_line(landing: &Landing) -> String {
    let mut text = serde_json::to_string(landing).unwrap_or_default();
    text.push('\n');
    text
}

fn serve_conn(tag: &str, stream: TcpStream) -> anyhow::Result<()> {
    let local = stream.local_addr().context("local_addr")?;
    let peer = fold_v4_mapped(stream.peer_addr().context("peer_addr")?);
    // The destination a transparent proxy would forward to, or the local address if none
    // was recorded.
    let orig = fold_v4_mapped(original_dst(&stream).unwrap_or(local));
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .context("set_read_timeout")?;
    let mut line = String::new();
    // The reply is sent even when the client sends nothing before the timeout.
    let _ = BufReader::new(&stream).read_line(&mut line);
    let landing = Landing {
        at: tag.to_owned(),
        orig: Some(orig),
        peer,
    };
    (&stream)
        .write_all(json_line(&landing).as_bytes())
        .context("write")?;
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
                let landing = Landing {
                    at: tag.clone(),
                    orig: None,
                    peer: fold_v4_mapped(from),
                };
                if let Err(e) = socket.send_to(json_line(&landing).as_bytes(), from) {
                    eprintln!("probe-listen {tag}: send_to {from}: {e}");
                }
            }
            Err(e) => eprintln!("probe-listen {tag}: recv_from: {e}"),
        }
    }
}

/// A bound socket and the `NAME/LISTEN_ADDR` tag it answers with.
#[derive(Debug)]
enum Bound {
    Tcp(String, TcpListener),
    Udp(String, UdpSocket),
}

/// Enters the cgroup and netns, then binds everything.
fn setup(args: &Args) -> anyhow::Result<Vec<Bound>> {
    args.place.enter()?;
    let mut bound = Vec::new();
    for l in &args.tcp {
        let listener = Bind::at(l.addr)
            .reuse_addr()
            .tcp()
            .with_context(|| format!("tcp {}", l.raw))?;
        bound.push(Bound::Tcp(format!("{}/{}", args.name, l.raw), listener));
    }
    for l in &args.udp {
        let socket = Bind::at(l.addr)
            .reuse_addr()
            .udp()
            .with_context(|| format!("udp {}", l.raw))?;
        bound.push(Bound::Udp(format!("{}/{}", args.name, l.raw), socket));
    }
    Ok(bound)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let bound = match setup(&args) {
        Ok(bound) => bound,
        Err(e) => {
            eprintln!("probe-listen: {e:#}");
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
