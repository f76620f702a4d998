//! probe-churn: what a hostile application does to the proxy-readiness count: in a chosen
//! cgroup, netns and uid, `--threads` threads each bind an IPv6-only TCP socket to `[::]:PORT`,
//! listen and close it, `--loops` times; prints `done N` (listens that succeeded). With
//! `--hold`, it instead listens once, prints `listening` and keeps it until killed.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    net::{Ipv6Addr, SocketAddrV6},
    os::fd::AsRawFd as _,
};

use anyhow::Context as _;
use clap::Parser;
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn6,
};
use redirect_tests::place::Place;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    place: Place,
    /// The port to listen on (`[::]`, IPv6 only, so it coexists with a `0.0.0.0` listener).
    #[arg(long)]
    port: u16,
    /// Threads churning at once.
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// listen/close rounds per thread.
    #[arg(long, default_value_t = 1000)]
    loops: usize,
    /// Listen once and hold it until killed.
    #[arg(long)]
    hold: bool,
}

/// One IPv6-only listener on `[::]:port`, closed when dropped.
fn listener(port: u16) -> anyhow::Result<std::os::fd::OwnedFd> {
    let fd = socket(
        AddressFamily::Inet6,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .context("socket")?;
    setsockopt(&fd, sockopt::Ipv6V6Only, &true).context("IPV6_V6ONLY")?;
    setsockopt(&fd, sockopt::ReuseAddr, &true).context("SO_REUSEADDR")?;
    let addr = SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0));
    bind(fd.as_raw_fd(), &addr).context("bind")?;
    listen(&fd, Backlog::new(8).context("backlog")?).context("listen")?;
    Ok(fd)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    if args.hold {
        let _l = listener(args.port)?;
        println!("listening");
        loop {
            std::thread::park();
        }
    }
    let handles: Vec<_> = (0..args.threads)
        .map(|_| {
            let (port, loops) = (args.port, args.loops);
            std::thread::spawn(move || (0..loops).filter(|_| listener(port).is_ok()).count())
        })
        .collect();
    let done: usize = handles.into_iter().map(|h| h.join().unwrap_or(0)).sum();
    println!("done {done}");
    Ok(())
}
