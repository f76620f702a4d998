//! probe-splice: a proxy's accepted socket used the hard ways (issue 34, item 5). `relay`
//! accepts one connection (from a listener the datapath put in `LISTENERS`, when it runs as
//! the pod's proxy), splices everything it receives to `--forward` through a pipe, waiting on
//! edge-triggered epoll and checking FIONREAD at every read wake-up, then writes `--reply`
//! bytes back on the accepted socket waiting on edge-triggered write wake-ups. `send` streams
//! `--bytes` to `--connect`, shuts its side down and reads the reply; `sink` receives one
//! connection to its end. Each prints one JSON line; the streams are compared by SHA-256.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    os::fd::{AsFd as _, AsRawFd as _},
};

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use nix::{
    fcntl::{splice, SpliceFFlags},
    sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout},
};
use redirect_tests::place::Place;
use sha2::{Digest as _, Sha256};

/// Bytes per block of the stream: a fixed pattern with the block's number in front.
const BLOCK: usize = 64 * 1024;

#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Stream `bytes` to `connect`, shut down, read the reply to its end.
    Send {
        #[command(flatten)]
        place: Place,
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long)]
        bytes: u64,
    },
    /// Accept one connection, splice it to `forward`, then reply `reply` bytes on it.
    Relay {
        #[command(flatten)]
        place: Place,
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        forward: SocketAddr,
        #[arg(long)]
        reply: u64,
    },
    /// Receive one connection to its end.
    Sink {
        #[command(flatten)]
        place: Place,
        #[arg(long)]
        listen: SocketAddr,
    },
}

/// The stream's bytes `n`: block `i` is the pattern with `i` in its first 8 bytes.
struct Stream {
    pattern: Vec<u8>,
    next: u64,
}

impl Stream {
    fn new() -> Self {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let pattern = (0..BLOCK)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Self { pattern, next: 0 }
    }

    fn block(&mut self) -> &[u8] {
        self.pattern[..8].copy_from_slice(&self.next.to_le_bytes());
        self.next += 1;
        &self.pattern
    }
}

fn main() -> anyhow::Result<()> {
    match Args::parse().role {
        Role::Send {
            place,
            connect,
            bytes,
        } => {
            place.enter()?;
            send(connect, bytes)
        }
        Role::Relay {
            place,
            listen,
            forward,
            reply,
        } => {
            place.enter()?;
            relay(listen, forward, reply)
        }
        Role::Sink { place, listen } => {
            place.enter()?;
            let l = TcpListener::bind(listen).context("bind")?;
            println!("listening {listen}");
            let (mut s, _) = l.accept().context("accept")?;
            let (n, hash) = drain(&mut s)?;
            println!("{}", serde_json::json!({"received": n, "sha256": hash}));
            Ok(())
        }
    }
}

fn drain(s: &mut TcpStream) -> anyhow::Result<(u64, String)> {
    let (mut n, mut h, mut buf) = (0u64, Sha256::new(), vec![0u8; BLOCK]);
    loop {
        let got = s.read(&mut buf).context("read")?;
        if got == 0 {
            return Ok((n, hex(&h.finalize())));
        }
        h.update(&buf[..got]);
        n += got as u64;
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn send(to: SocketAddr, bytes: u64) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(to).with_context(|| format!("connect {to}"))?;
    let (mut stream, mut h, mut left) = (Stream::new(), Sha256::new(), bytes);
    while left > 0 {
        let block = stream.block();
        let take = block.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        s.write_all(&block[..take]).context("write")?;
        h.update(&block[..take]);
        left -= take as u64;
    }
    s.shutdown(std::net::Shutdown::Write).context("shutdown")?;
    let (got, reply) = drain(&mut s)?;
    println!(
        "{}",
        serde_json::json!({"sent": bytes, "sha256": hex(&h.finalize()), "reply_received": got, "reply_sha256": reply})
    );
    Ok(())
}

/// Bytes readable on `s` now (FIONREAD).
fn fionread(s: &TcpStream) -> anyhow::Result<i32> {
    let mut n: libc::c_int = 0;
    // SAFETY: syscall edge: FIONREAD writes one int through a valid pointer on an open socket.
    let rc = unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) };
    if rc != 0 {
        bail!("FIONREAD: {}", std::io::Error::last_os_error());
    }
    Ok(n)
}

fn relay(listen: SocketAddr, forward: SocketAddr, reply: u64) -> anyhow::Result<()> {
    let l = TcpListener::bind(listen).context("bind")?;
    println!("listening {listen}");
    let (client, peer) = l.accept().context("accept")?;
    let out = TcpStream::connect(forward).with_context(|| format!("connect {forward}"))?;
    client.set_nonblocking(true)?;
    out.set_nonblocking(true)?;
    let (pipe_r, pipe_w) = nix::unistd::pipe().context("pipe")?;
    let epoll = Epoll::new(EpollCreateFlags::empty()).context("epoll")?;
    let et = EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT | EpollFlags::EPOLLET;
    epoll.add(&client, EpollEvent::new(et, 1))?;
    epoll.add(&out, EpollEvent::new(et, 2))?;
    let mut events = [EpollEvent::empty(); 4];
    let (mut relayed, mut in_pipe, mut eof) = (0u64, 0usize, false);
    let (mut wakeups, mut fionread_zero) = (0u64, 0u64);
    let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
    let mut readable = true;
    // Phase 1: the client's stream to `forward`, through the pipe.
    while !(eof && in_pipe == 0) {
        if readable && !eof && in_pipe == 0 {
            match splice(client.as_fd(), None, pipe_w.as_fd(), None, 1 << 20, flags) {
                Ok(0) => eof = true,
                Ok(n) => in_pipe += n,
                Err(nix::errno::Errno::EAGAIN) => readable = false,
                Err(e) => bail!("splice from the accepted socket: {e}"),
            }
        }
        let mut out_blocked = false;
        while in_pipe > 0 {
            match splice(pipe_r.as_fd(), None, out.as_fd(), None, in_pipe, flags) {
                Ok(n) => {
                    in_pipe -= n;
                    relayed += n as u64;
                }
                Err(nix::errno::Errno::EAGAIN) => {
                    out_blocked = true;
                    break;
                }
                Err(e) => bail!("splice to {forward}: {e}"),
            }
        }
        // Nothing to do until a wake-up: the pipe cannot drain, or it is empty and the
        // accepted socket has nothing to read yet.
        let stuck = out_blocked || (in_pipe == 0 && !readable && !eof);
        if stuck {
            let n = epoll.wait(&mut events, EpollTimeout::from(30_000u16))?;
            if n == 0 {
                bail!("no wake-up in 30 s with {in_pipe} bytes in the pipe (eof {eof})");
            }
            for ev in &events[..n] {
                if ev.data() == 1 && ev.events().contains(EpollFlags::EPOLLIN) {
                    wakeups += 1;
                    readable = true;
                    // Woken to read: bytes are there, or the peer closed (a read of 0).
                    if fionread(&client)? == 0 {
                        let mut probe = [0u8; 1];
                        if client.peek(&mut probe).map_or(true, |n| n > 0) {
                            fionread_zero += 1;
                        }
                    }
                }
            }
        }
    }
    drop(out);
    // Phase 2: the reply on the accepted socket, waiting on write wake-ups.
    let (mut stream, mut h, mut left, mut write_wakeups) =
        (Stream::new(), Sha256::new(), reply, 0u64);
    let mut client = client;
    let mut block: Vec<u8> = Vec::new();
    let mut at = 0usize;
    while left > 0 || at < block.len() {
        if at == block.len() {
            let b = stream.block();
            let take = b.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            block = b[..take].to_vec();
            h.update(&block);
            left -= take as u64;
            at = 0;
        }
        match client.write(&block[at..]) {
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let n = epoll.wait(&mut events, EpollTimeout::from(30_000u16))?;
                if n == 0 {
                    bail!("no write wake-up in 30 s");
                }
                write_wakeups += 1;
            }
            Err(e) => bail!("write the reply: {e}"),
        }
    }
    client
        .shutdown(std::net::Shutdown::Write)
        .context("shutdown")?;
    println!(
        "{}",
        serde_json::json!({
            "peer": peer.to_string(), "relayed": relayed, "read_wakeups": wakeups,
            "fionread_zero_on_wakeup": fionread_zero, "replied": reply,
            "reply_sha256": hex(&h.finalize()), "write_wakeups": write_wakeups,
        })
    );
    // Wait for the client to finish reading before closing (a close with unread data resets).
    let mut rest = [0u8; 1];
    client.set_nonblocking(false)?;
    let _ = client.read(&mut rest);
    Ok(())
}
