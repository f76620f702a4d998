//! The probe server: answers each connection with a line naming itself and the peer it saw.
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{Arc, Mutex},
    thread,
};

use crate::netns::Netns;

/// One connection the server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHit {
    /// The peer address the server saw.
    pub peer: SocketAddr,
    /// The first line the client sent.
    pub line: String,
}

/// Writes the reply for one request line.
pub fn reply_line(tag: &str, peer: SocketAddr, line: &str) -> String {
    format!("tag={tag} peer={peer} got={line}\n")
}

/// Serves one connection: reads a line (or an HTTP request head) and answers.
pub fn serve_one(mut stream: TcpStream, tag: &str, http: bool) -> std::io::Result<ServerHit> {
    let peer = stream.peer_addr()?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let line = first.trim_end().to_owned();
    if http {
        let mut header = String::new();
        while reader.read_line(&mut header)? > 2 {
            header.clear();
        }
        let body =
            format!("hello from the server host ({tag}); it saw the connection come from {peer}\n");
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
    } else {
        stream.write_all(reply_line(tag, peer, &line).as_bytes())?;
    }
    Ok(ServerHit { peer, line })
}

/// A line server running on threads of the test process, inside a namespace.
#[derive(Debug)]
pub struct EchoServer {
    /// Where it listens.
    pub addr: SocketAddr,
    hits: Arc<Mutex<Vec<ServerHit>>>,
}

impl EchoServer {
    /// Binds `addr` inside `ns` and serves until the process exits (the namespace's removal
    /// closes nothing, but the listener is only reachable from the test's own namespaces).
    pub fn start(ns: &Netns, addr: &str, tag: &str) -> Self {
        let addr: SocketAddr = addr.parse().expect("server address");
        let listener = ns.run(move || TcpListener::bind(addr).expect("bind probe server"));
        let hits = Arc::new(Mutex::new(Vec::new()));
        let (tag, record) = (tag.to_owned(), Arc::clone(&hits));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (tag, record) = (tag.clone(), Arc::clone(&record));
                thread::spawn(move || {
                    if let Ok(hit) = serve_one(stream, &tag, false) {
                        record.lock().expect("lock").push(hit);
                    }
                });
            }
        });
        Self { addr, hits }
    }

    /// Connections served so far.
    pub fn hits(&self) -> Vec<ServerHit> {
        self.hits.lock().expect("lock").clone()
    }
}
