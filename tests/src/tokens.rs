//! The world of the node tests: a TCP listener in a network namespace that records each
//! connection's first line (a token naming the pod and the connection) and answers `world`.
//! A token that reached it without a record in its pod's proxy log escaped capture.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    path::Path,
    sync::{Arc, Mutex},
};

use redirect_testkit::netns::in_netns;

/// Every token that reached the world, in order.
pub type Reached = Arc<Mutex<Vec<String>>>;

/// Listens on `0.0.0.0:port` in the network namespace at `netns`, recording tokens.
pub fn listen(netns: &Path, port: u16) -> anyhow::Result<Reached> {
    let listener = in_netns(netns, move || TcpListener::bind(("0.0.0.0", port)))??;
    let seen: Reached = Arc::default();
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(&stream).read_line(&mut line);
                let _ = stream.write_all(b"world\n");
                s.lock().expect("seen").push(line.trim().to_owned());
            });
        }
    });
    Ok(seen)
}
