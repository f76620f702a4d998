//! The echo server: answers each connection with one JSON [`Echo`] line naming itself, the
//! peer it saw and the line it got (or, with HTTP, a response whose body says the same).
use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{SocketAddr, TcpStream},
    sync::{Arc, Mutex},
    thread,
};

use redirect_testkit::{probe::Echo, Listen, Netns};

/// One connection the server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerHit {
    /// The peer address the server saw.
    pub peer: SocketAddr,
    /// The first line the client sent.
    pub line: String,
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
        let echo = Echo {
            tag: tag.to_owned(),
            peer,
            got: line.clone(),
        };
        let mut reply = serde_json::to_string(&echo)?;
        reply.push('\n');
        stream.write_all(reply.as_bytes())?;
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
    /// Binds `addr` inside `ns` and serves until the process exits (the listener is only
    /// reachable from the test's own namespaces).
    pub fn start(ns: &Netns, addr: &str, tag: &str) -> Self {
        let listener = Listen::on(addr)
            .netns(ns)
            .tcp()
            .expect("bind the echo server");
        let addr = listener.local_addr().expect("echo server address");
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
