//! probe-loop: an application that keeps connecting while the datapath changes under it (the
//! upgrade test): in a chosen cgroup, netns and uid, connects to `--dst` again and again until
//! the file `--until` exists; every connection must land on the proxy (probe-listen's JSON
//! `Landing` line) with `SO_ORIGINAL_DST` = `--dst`. Prints `progress N` every `--every`
//! connections, then one JSON line `{"ok":N,"failed":N,"wrong":N,"first_problem":...}`.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpStream},
    path::PathBuf,
    time::Duration,
};

use clap::Parser;
use redirect_testkit::probe::Landing;
use redirect_tests::place::Place;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    place: Place,
    /// The destination the application dials (captured to the proxy).
    #[arg(long)]
    dst: SocketAddr,
    /// Stop once this file exists.
    #[arg(long)]
    until: PathBuf,
    /// Print `progress N` every this many connections.
    #[arg(long, default_value_t = 20)]
    every: usize,
}

/// One connection: where it landed, or why it did not.
fn once(dst: SocketAddr) -> Result<Landing, String> {
    let stream = TcpStream::connect_timeout(&dst, Duration::from_secs(5))
        .map_err(|e| format!("connect {dst}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(b"ping\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    serde_json::from_str(line.trim()).map_err(|e| format!("answer {line:?}: {e}"))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    args.place.enter()?;
    let (mut ok, mut failed, mut wrong) = (0usize, 0usize, 0usize);
    let mut first_problem: Option<String> = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(600);
    while !args.until.exists() && std::time::Instant::now() < deadline {
        match once(args.dst) {
            Ok(l) if l.orig == Some(args.dst) => ok += 1,
            Ok(l) => {
                wrong += 1;
                first_problem.get_or_insert_with(|| format!("landed {l}"));
            }
            Err(e) => {
                failed += 1;
                first_problem.get_or_insert(e);
            }
        }
        let n = ok + failed + wrong;
        if n % args.every.max(1) == 0 {
            println!("progress {n}");
            std::io::stdout().flush()?;
        }
    }
    println!(
        "{}",
        serde_json::json!({"ok": ok, "failed": failed, "wrong": wrong, "first_problem": first_problem})
    );
    Ok(())
}
