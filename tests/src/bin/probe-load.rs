//! probe-load: the benchmark's server and load generator (same binary in every mode).
//!
//! Wire protocol: the client's first byte picks the mode. `P`: ping-pong, the server echoes
//! every 16-byte request until EOF. `B`: bulk, the server reads to EOF and answers the byte
//! count as 8 little-endian bytes. A server started with `--greeting X` instead writes `X` on
//! accept and closes (the capture detector of the enrollment benchmark). Every result is one
//! JSON `redirect_testkit::probe::Load` line.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    net::SocketAddr,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use redirect_testkit::probe::Load;
use redirect_tests::place::Place;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

const REQ: usize = 16;

/// The benchmark's server and load generator.
#[derive(Debug, Parser)]
struct Args {
    /// Where to run (given before the subcommand).
    #[command(flatten)]
    place: Place,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Serve the protocol above.
    Server {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        greeting: Option<char>,
    },
    /// Short connections: connect, 16-byte request, 16-byte reply, close.
    Cps {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        #[arg(long)]
        duration_ms: u64,
    },
    /// Persistent connections, request latency.
    Keepalive {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 1)]
        concurrency: usize,
        #[arg(long)]
        duration_ms: u64,
    },
    /// One connection sending `bytes` as fast as it can.
    Bulk {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long)]
        bytes: u64,
    },
    /// Connects every few hundred microseconds until the capture detector answers; prints the
    /// wall-clock time of the first captured connection.
    UntilCaptured {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
}

fn cpu_ms() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF);
    usage.map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1e3 + tv.tv_usec() as f64 / 1e3;
        t(u.user_time()) + t(u.system_time())
    })
}

async fn serve(listen: SocketAddr, greeting: Option<char>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(listen).await.context("bind")?;
    print_line(&Load::Listening { addr: listen });
    loop {
        let (mut s, _) = listener.accept().await?;
        tokio::spawn(async move {
            let _ = s.set_nodelay(true);
            if let Some(g) = greeting {
                let _ = s.write_all(g.to_string().as_bytes()).await;
                return;
            }
            let mut mode = [0u8; 1];
            if s.read_exact(&mut mode).await.is_err() {
                return;
            }
            if mode[0] == b'B' {
                let mut buf = vec![0u8; 256 * 1024];
                let mut total = 0u64;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                let _ = s.write_all(&total.to_le_bytes()).await;
                return;
            }
            let mut req = [0u8; REQ];
            while s.read_exact(&mut req).await.is_ok() {
                if s.write_all(&req).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn one_short(addr: SocketAddr) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    s.set_nodelay(true)?;
    let mut msg = [b'x'; REQ + 1];
    msg[0] = b'P';
    s.write_all(&msg).await?;
    let mut reply = [0u8; REQ];
    s.read_exact(&mut reply).await?;
    Ok(())
}

fn print_line(line: &Load) {
    println!("{}", serde_json::to_string(line).unwrap_or_default());
}

async fn cps(addr: SocketAddr, concurrency: usize, duration: Duration) -> Load {
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            tokio::spawn(async move {
                let (mut ok, mut err) = (0u64, 0u64);
                while Instant::now() < deadline {
                    match one_short(addr).await {
                        Ok(()) => ok += 1,
                        Err(_) => err += 1,
                    }
                }
                (ok, err)
            })
        })
        .collect();
    let (mut ok, mut err) = (0, 0);
    for t in tasks {
        let (o, e) = t.await.unwrap_or((0, 1));
        ok += o;
        err += e;
    }
    let secs = start.elapsed().as_secs_f64();
    Load::Cps {
        connections: ok,
        errors: err,
        seconds: secs,
        per_second: ok as f64 / secs,
        cpu_ms: cpu_ms(),
    }
}

async fn keepalive(
    addr: SocketAddr,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Load> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let mut s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        s.write_all(b"P").await?;
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(100_000);
            let req = [b'y'; REQ];
            let mut reply = [0u8; REQ];
            while Instant::now() < deadline {
                let t = Instant::now();
                if s.write_all(&req).await.is_err() || s.read_exact(&mut reply).await.is_err() {
                    break;
                }
                lat.push(t.elapsed().as_nanos() as u64);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1e3
    };
    let secs = start.elapsed().as_secs_f64();
    Ok(Load::Keepalive {
        requests: all.len() as u64,
        per_second: all.len() as f64 / secs,
        p50_us: pct(0.50),
        p90_us: pct(0.90),
        p99_us: pct(0.99),
        seconds: secs,
        cpu_ms: cpu_ms(),
    })
}

async fn bulk(addr: SocketAddr, bytes: u64) -> anyhow::Result<Load> {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(b"B").await?;
    let chunk = vec![0u8; 256 * 1024];
    let mut sent = 0u64;
    while sent < bytes {
        let n = chunk.len().min((bytes - sent) as usize);
        s.write_all(&chunk[..n]).await?;
        sent += n as u64;
    }
    s.shutdown().await?;
    let mut count = [0u8; 8];
    s.read_exact(&mut count).await?;
    let secs = start.elapsed().as_secs_f64();
    let received = u64::from_le_bytes(count);
    anyhow::ensure!(
        received == bytes,
        "server received {received} of {bytes} bytes"
    );
    Ok(Load::Bulk {
        bytes,
        seconds: secs,
        mib_per_second: bytes as f64 / 1048576.0 / secs,
        cpu_ms: cpu_ms(),
    })
}

async fn until_captured(addr: SocketAddr, timeout: Duration) -> Load {
    // The caller starts the clock on this line: the process is up and dialling.
    print_line(&Load::Probing { addr });
    let start = Instant::now();
    let mut attempts = 0u64;
    while start.elapsed() < timeout {
        attempts += 1;
        // Each attempt is bounded: a connection caught mid-way by rules being loaded can stall.
        let attempt = async {
            let mut s = TcpStream::connect(addr).await.ok()?;
            let mut msg = [b'x'; REQ + 1];
            msg[0] = b'P';
            let mut first = [0u8; 1];
            s.write_all(&msg).await.ok()?;
            s.read_exact(&mut first).await.ok()?;
            Some(first[0])
        };
        if let Ok(Some(b'C')) = tokio::time::timeout(Duration::from_millis(20), attempt).await {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            return Load::UntilCaptured {
                captured: true,
                unix_us: Some(now.as_micros() as u64),
                attempts,
            };
        }
        // Deliberate pacing of the dial loop (the detection resolution), not a wait for X.
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Load::UntilCaptured {
        captured: false,
        unix_us: None,
        attempts,
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    // Worker threads are created after setns, so they inherit the namespace.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let out = match args.cmd {
            Cmd::Server { listen, greeting } => return serve(listen, greeting).await,
            Cmd::Cps {
                connect,
                concurrency,
                duration_ms,
            } => cps(connect, concurrency, Duration::from_millis(duration_ms)).await,
            Cmd::Keepalive {
                connect,
                concurrency,
                duration_ms,
            } => keepalive(connect, concurrency, Duration::from_millis(duration_ms)).await?,
            Cmd::Bulk { connect, bytes } => bulk(connect, bytes).await?,
            Cmd::UntilCaptured {
                connect,
                timeout_ms,
            } => until_captured(connect, Duration::from_millis(timeout_ms)).await,
        };
        print_line(&out);
        Ok(())
    })
}
