//! Misbehaving HTTP clients for the metrics and admin ports: a slow drip, an oversized head,
//! deterministic garbage; and a plain `GET` with a bounded wait, from the host or inside a
//! namespace of the test.
use std::{
    io::{ErrorKind, Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    path::PathBuf,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use redirect_testkit::{netns::in_netns, wait::scaled};

/// An HTTP endpoint: an address, inside a network namespace when `netns` is set.
#[derive(Debug, Clone)]
pub struct Target {
    /// The listening address.
    pub addr: SocketAddr,
    /// The namespace to connect from (the host's when `None`).
    pub netns: Option<PathBuf>,
}

impl Target {
    /// A TCP connection to the endpoint (created inside its namespace, usable anywhere).
    pub fn connect(&self) -> std::io::Result<TcpStream> {
        let addr = self.addr;
        let timeout = scaled(Duration::from_secs(5));
        match &self.netns {
            None => TcpStream::connect_timeout(&addr, timeout),
            Some(path) => in_netns(path, move || TcpStream::connect_timeout(&addr, timeout))
                .map_err(std::io::Error::other)?,
        }
    }

    /// A TCP connection to the endpoint (an IPv4 one on the host) from the local address
    /// `source` (any of 127.0.0.0/8 on loopback): another peer than [`Target::connect`]'s.
    pub fn connect_from(&self, source: std::net::Ipv4Addr) -> std::io::Result<TcpStream> {
        use nix::sys::socket::{
            bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
        };
        use std::os::fd::AsRawFd as _;
        let SocketAddr::V4(to) = self.addr else {
            return Err(std::io::Error::other("connect_from: an IPv4 endpoint only"));
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        bind(
            fd.as_raw_fd(),
            &SockaddrIn::from(std::net::SocketAddrV4::new(source, 0)),
        )?;
        connect(fd.as_raw_fd(), &SockaddrIn::from(to))?;
        Ok(TcpStream::from(fd))
    }

    /// `GET path`, waiting at most `wait` for the whole answer: (status, body), or what went
    /// wrong (connect, send, timeout, malformed answer).
    pub fn get(&self, path: &str, wait: Duration) -> Result<(u16, String), String> {
        let mut s = self.connect().map_err(|e| format!("connect: {e}"))?;
        let _ = s.set_read_timeout(Some(scaled(wait)));
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.addr
        )
        .map_err(|e| format!("send: {e}"))?;
        let mut text = Vec::new();
        s.read_to_end(&mut text)
            .map_err(|e| format!("reading the answer to GET {path}: {e}"))?;
        let text = String::from_utf8_lossy(&text);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no HTTP answer: {text:?}"))?;
        Ok((status_of(head), body.to_owned()))
    }
}

/// The status code of an HTTP response head (0 when there is none).
pub fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// What a slow-drip client saw.
#[derive(Debug)]
pub struct Drip {
    /// Bytes it managed to send.
    pub sent: usize,
    /// How long after connecting the server ended the connection (`None`: it never did).
    pub cut_after: Option<Duration>,
    /// What the server sent before ending it.
    pub answer: String,
}

/// Sends an HTTP request line that never ends, one byte every `every`, on `stream`, until the
/// server ends the connection or `give_up` has passed; the pacing is the socket's read
/// timeout, so the end is seen as soon as it happens.
pub fn slow_drip(mut stream: TcpStream, every: Duration, give_up: Duration) -> JoinHandle<Drip> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let give_up = scaled(give_up);
        let line = b"GET /metrics?slow=";
        let mut drip = Drip {
            sent: 0,
            cut_after: None,
            answer: String::new(),
        };
        let _ = stream.set_read_timeout(Some(every));
        let mut buf = [0u8; 1024];
        while start.elapsed() < give_up {
            let byte = line.get(drip.sent).copied().unwrap_or(b'a');
            if stream.write_all(&[byte]).is_err() {
                drip.cut_after = Some(start.elapsed());
                break;
            }
            drip.sent += 1;
            match stream.read(&mut buf) {
                Ok(0) => {
                    drip.cut_after = Some(start.elapsed());
                    break;
                }
                Ok(n) => drip.answer.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => {
                    drip.cut_after = Some(start.elapsed());
                    break;
                }
            }
        }
        drip
    })
}

/// How the server took a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It answered with this status.
    Status(u16),
    /// It closed (or reset) the connection without an answer.
    Closed,
    /// It neither answered nor closed within the wait.
    Hung,
}

/// Sends `request` (write errors are ignored: the server may close while it is being sent),
/// half-closes, and reads what comes back for at most `wait`.
pub fn send_raw(target: &Target, request: &[u8], wait: Duration) -> Result<Outcome, String> {
    let mut s = target.connect().map_err(|e| format!("connect: {e}"))?;
    let _ = s.set_read_timeout(Some(scaled(wait)));
    let _ = s.set_write_timeout(Some(scaled(wait)));
    let _ = s.write_all(request);
    let _ = s.shutdown(Shutdown::Write);
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(Outcome::Hung)
            }
            Err(_) => break,
        }
    }
    let text = String::from_utf8_lossy(&answer);
    Ok(match text.split_once("\r\n") {
        Some((line, _)) if line.starts_with("HTTP/") => Outcome::Status(status_of(line)),
        _ if answer.is_empty() => Outcome::Closed,
        _ => Outcome::Status(0),
    })
}

/// A request whose request line is `size` bytes long.
pub fn long_request_line(size: usize) -> Vec<u8> {
    let mut r = b"GET /metrics?".to_vec();
    r.resize(size, b'a');
    r.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    r
}

/// A request with one header of `size` bytes.
pub fn long_header(size: usize) -> Vec<u8> {
    let mut r = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    r.resize(size, b'b');
    r.extend_from_slice(b"\r\n\r\n");
    r
}

/// Up to `max` pseudo-random bytes.
fn bytes(max: u64, next: &mut impl FnMut() -> u64) -> Vec<u8> {
    let len = next() % max.max(1);
    (0..len).map(|_| next().to_le_bytes()[3]).collect()
}

/// `n` garbage requests from `seed`, the same every run: random bytes, broken request lines,
/// unknown methods, bad header bytes, lying lengths, broken chunks, an HTTP/2 preface, header
/// floods.
pub fn garbage(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut state = seed | 1;
    let mut next = move || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    (0..n)
        .map(|i| {
            let mut r = Vec::new();
            match i % 8 {
                0 => r = bytes(4096, &mut next),
                1 => {
                    r.extend_from_slice(b"GET ");
                    r.extend(bytes(512, &mut next));
                    r.extend_from_slice(b"\r\n\r\n");
                }
                2 => {
                    r.extend_from_slice(b"GET /metrics HTTP/1.1\r\n");
                    r.extend(bytes(1024, &mut next));
                    r.extend_from_slice(b"\r\n\r\n");
                }
                3 => {
                    r.extend(bytes(16, &mut next));
                    r.extend_from_slice(b" /stats/prometheus HTTP/1.1\r\nHost: x\r\n\r\n");
                }
                4 => {
                    let len = next() % 100_000_000;
                    r.extend_from_slice(
                        format!("POST /drain_listeners HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\n\r\n").as_bytes(),
                    );
                    r.extend(bytes(2048, &mut next));
                }
                5 => {
                    r.extend_from_slice(
                        b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                    );
                    r.extend(bytes(64, &mut next));
                    r.extend_from_slice(b"\r\n");
                    r.extend(bytes(256, &mut next));
                }
                6 => {
                    r.extend_from_slice(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                    r.extend(bytes(512, &mut next));
                }
                _ => {
                    r.extend_from_slice(b"GET /healthz/ready HTTP/1.1\r\n");
                    for h in 0..(next() % 400) {
                        r.extend_from_slice(format!("X-{h}: {}\r\n", next()).as_bytes());
                    }
                    r.extend_from_slice(b"\r\n");
                }
            }
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_deterministic_and_varied() {
        let (a, b) = (garbage(7, 64), garbage(7, 64));
        assert_eq!(a, b);
        assert_ne!(a, garbage(8, 64));
        assert!(a.iter().any(|r| r.starts_with(b"PRI * HTTP/2.0")));
        assert!(a.iter().any(|r| r.len() > 1000));
    }

    #[test]
    fn oversized_requests_have_the_size_asked() {
        assert!(long_request_line(1 << 20).len() > 1 << 20);
        assert!(long_header(1 << 20).len() > 1 << 20);
        assert!(long_request_line(64).starts_with(b"GET /metrics?aaa"));
    }
}
