//! probe-hold: a long-lived connection, both ends. `serve --tcp ADDR --name NAME` answers
//! every line of every connection with one JSON `Landing` line and keeps the connection open;
//! `connect --dst ADDR` (in a chosen cgroup, netns and uid) keeps one connection and sends a
//! line every `--every-ms`, printing each answer's `Landing` line; when the connection ends
//! (reset, closed) it prints `ended: WHY` and connects again, as a pooled client does.
//! `answer-unix --path P --line TEXT` answers every line of every connection to the unix
//! socket `P` with `TEXT` (a process posing as the daemon at its socket's path);
//! `ask-unix --path P --line TEXT` sends `TEXT` on one connection to `P` and prints the answer
//! line (a client of the daemon judged as whatever process runs it).
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    time::Duration,
};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use redirect_sys::{fold_v4_mapped, original_dst};
use redirect_testkit::probe::Landing;
use redirect_tests::place::Place;

#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Answer every line, keep every connection.
    Serve {
        #[command(flatten)]
        place: Place,
        /// Tag of the answers.
        #[arg(long)]
        name: String,
        /// TCP listen address.
        #[arg(long)]
        tcp: SocketAddr,
    },
    /// Answer every request line on the unix socket `path` with `line`.
    AnswerUnix {
        /// The socket's path (made, then removed at exit).
        #[arg(long)]
        path: std::path::PathBuf,
        /// The answer.
        #[arg(long)]
        line: String,
    },
    /// Send `line` on one connection to the unix socket `path`; print the answer.
    AskUnix {
        /// The socket's path.
        #[arg(long)]
        path: std::path::PathBuf,
        /// The request line.
        #[arg(long)]
        line: String,
    },
    /// Keep one connection to `dst`, a line every `every_ms`.
    Connect {
        #[command(flatten)]
        place: Place,
        /// Destination.
        #[arg(long)]
        dst: SocketAddr,
        /// Milliseconds between two lines.
        #[arg(long, default_value_t = 100)]
        every_ms: u64,
        /// Descriptors (of /dev/null) to hold besides, as a process with many files does.
        #[arg(long, default_value_t = 0)]
        hold_fds: u64,
    },
}

fn serve_conn(name: &str, tcp: SocketAddr, stream: &TcpStream) -> anyhow::Result<()> {
    let peer = fold_v4_mapped(stream.peer_addr().context("peer_addr")?);
    let orig = fold_v4_mapped(original_dst(stream).unwrap_or(stream.local_addr()?));
    let landing = Landing {
        at: format!("{name}/{tcp}"),
        orig: Some(orig),
        peer,
    };
    let mut line = serde_json::to_string(&landing)?;
    line.push('\n');
    let mut reader = BufReader::new(stream);
    let mut got = String::new();
    while reader.read_line(&mut got)? > 0 {
        got.clear();
        (&*stream).write_all(line.as_bytes())?;
    }
    Ok(())
}

/// `n` descriptors of /dev/null, the open-files limit raised to fit them (the hard limit too
/// only where it must: that needs CAP_SYS_RESOURCE).
fn hold_files(n: u64) -> anyhow::Result<Vec<std::fs::File>> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if n == 0 {
        return Ok(Vec::new());
    }
    let want = n + 64;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want))
            .with_context(|| format!("RLIMIT_NOFILE {want} (hard limit {hard})"))?;
    }
    let null = std::fs::File::open("/dev/null")?;
    (0..n).map(|_| null.try_clone().context("dup")).collect()
}

/// One connection's life: the answers printed; why it ended.
fn hold(dst: SocketAddr, every: Duration) -> String {
    let stream = match TcpStream::connect_timeout(&dst, Duration::from_secs(5)) {
        Ok(s) => s,
        Err(e) => return format!("connect: {e}"),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut reader = BufReader::new(&stream);
    loop {
        if let Err(e) = (&stream).write_all(b"ping\n") {
            return format!("write: {e}");
        }
        let mut answer = String::new();
        match reader.read_line(&mut answer) {
            Ok(0) => return "closed".to_owned(),
            Ok(_) => println!("{}", answer.trim_end()),
            Err(e) => return format!("read: {e}"),
        }
        std::thread::sleep(every);
    }
}

fn main() -> anyhow::Result<()> {
    match Args::parse().role {
        Role::Serve { place, name, tcp } => {
            place.enter()?;
            let listener = TcpListener::bind(tcp).with_context(|| format!("bind {tcp}"))?;
            println!("ready");
            for stream in listener.incoming().flatten() {
                let name = name.clone();
                std::thread::spawn(move || {
                    if let Err(e) = serve_conn(&name, tcp, &stream) {
                        eprintln!("probe-hold serve: {e:#}");
                    }
                });
            }
            Ok(())
        }
        Role::AnswerUnix { path, line } => {
            let listener = std::os::unix::net::UnixListener::bind(&path)
                .with_context(|| format!("bind {}", path.display()))?;
            println!("ready");
            for stream in listener.incoming().flatten() {
                let mut got = String::new();
                if BufReader::new(&stream).read_line(&mut got).is_ok() {
                    let _ = (&stream).write_all(format!("{line}\n").as_bytes());
                }
            }
            Ok(())
        }
        Role::AskUnix { path, line } => {
            let stream = std::os::unix::net::UnixStream::connect(&path)
                .with_context(|| format!("connect {}", path.display()))?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            (&stream).write_all(format!("{line}\n").as_bytes())?;
            let mut answer = String::new();
            BufReader::new(&stream).read_line(&mut answer)?;
            println!("{}", answer.trim_end());
            Ok(())
        }
        Role::Connect {
            place,
            dst,
            every_ms,
            hold_fds,
        } => {
            // Raised while still root: the limit stays when `place` drops privileges.
            let held = hold_files(hold_fds)?;
            place.enter()?;
            println!("holding {} descriptors", held.len());
            let every = Duration::from_millis(every_ms);
            loop {
                println!("ended: {}", hold(dst, every));
                std::thread::sleep(every);
            }
        }
    }
}
