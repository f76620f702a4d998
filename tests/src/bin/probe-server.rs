//! probe-server: a tiny line (JSON `Echo` answers) or HTTP server for `cargo xtask run` and
//! manual checks.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::net::SocketAddr;

use clap::Parser;
use redirect_testkit::Listen;

/// Answers every connection with its tag and the peer address it saw.
#[derive(Debug, Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    listen: SocketAddr,
    /// Name included in every reply.
    #[arg(long, default_value = "server")]
    tag: String,
    /// Speak HTTP/1.1 (one response per connection) instead of lines.
    #[arg(long)]
    http: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = Listen::at(args.listen).tcp()?;
    println!("listening on {}", args.listen);
    for stream in listener.incoming().flatten() {
        let (tag, http) = (args.tag.clone(), args.http);
        std::thread::spawn(move || {
            if let Ok(hit) = redirect_tests::server::serve_one(stream, &tag, http) {
                println!("served {} ({:?})", hit.peer, hit.line);
            }
        });
    }
    Ok(())
}
