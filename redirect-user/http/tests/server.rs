//! The server on real loopback sockets: slow clients are cut at the deadline while others are
//! answered, heads and bodies past their caps are refused, the connection cap closes the
//! excess, HEAD and 405 behave.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::{
    io::{ErrorKind, Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use redirect_http::{spawn_on, Limits, Method, Request, Response, StatusCode};

/// The runtime the servers of these tests run on.
static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
});

fn limits() -> Limits {
    Limits {
        max_connections: 8,
        header_timeout: Duration::from_secs(2),
        deadline: Duration::from_secs(2),
        ..Limits::default()
    }
}

async fn handler(req: Request) -> Response {
    match (req.method.clone(), req.path.as_str()) {
        (Method::GET, "/metrics") => Response::prometheus("# TYPE up gauge\nup 1\n".to_owned()),
        (Method::POST, "/echo") => Response::text(
            StatusCode::OK,
            String::from_utf8_lossy(&req.body).into_owned(),
        ),
        (Method::GET, "/hang") => std::future::pending().await,
        (_, "/metrics") => Response::method_not_allowed(&req, "GET, HEAD"),
        _ => Response::not_found(&req),
    }
}

fn start(limits: Limits) -> SocketAddr {
    spawn_on(
        RUNTIME.handle(),
        "test endpoint",
        "127.0.0.1:0".parse().expect("addr"),
        limits,
        handler,
    )
    .expect("server")
}

/// Sends `request`, half-closes, reads until the server closes (at most `wait`): the answer,
/// or `None` when the wait ran out first.
fn exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> Option<String> {
    exchange_with(addr, request, wait, true)
}

/// [`exchange`], half-closing only when asked (hyper ends a connection whose client
/// half-closed, so a client that wants its answer stays open).
fn exchange_with(
    addr: SocketAddr,
    request: &[u8],
    wait: Duration,
    half_close: bool,
) -> Option<String> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(wait)).expect("timeout");
    let _ = s.write_all(request);
    if half_close {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(_) => break,
        }
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

fn get(addr: SocketAddr, path: &str) -> String {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        Duration::from_secs(5),
    )
    .unwrap_or_else(|| panic!("GET {path}: no answer"))
}

/// Drips `head` one byte per `every` (paced by the read timeout) until the server ends the
/// connection; returns when that was, or `None` if it did not within `give_up`.
fn drip(mut s: TcpStream, head: &[u8], every: Duration, give_up: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(every)).expect("timeout");
    let mut buf = [0u8; 512];
    for byte in head.iter().chain(std::iter::repeat(&b'a')) {
        if start.elapsed() > give_up || s.write_all(&[*byte]).is_err() {
            break;
        }
        match s.read(&mut buf) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            _ => return Some(start.elapsed()),
        }
    }
    (start.elapsed() <= give_up).then(|| start.elapsed())
}

#[test]
fn slow_heads_and_bodies_are_cut_while_others_are_answered() {
    let addr = start(limits());
    let every = Duration::from_millis(300);
    let give_up = Duration::from_secs(10);
    let slow = [
        b"GET /metrics?".to_vec(),
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n".to_vec(),
    ]
    .map(|head| {
        let s = TcpStream::connect(addr).expect("connect");
        std::thread::spawn(move || drip(s, &head, every, give_up))
    });
    let answer = get(addr, "/metrics");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.contains("\r\n\r\n# TYPE up gauge\nup 1\n"),
        "{answer}"
    );
    for t in slow {
        let cut = t
            .join()
            .expect("drip")
            .expect("a slow client was never cut");
        assert!(cut < Duration::from_secs(4), "cut after {cut:?}");
    }
}

#[test]
fn a_handler_that_never_answers_is_cut_at_the_deadline() {
    let addr = start(limits());
    let answer = exchange_with(
        addr,
        b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(10),
        false,
    );
    assert_eq!(answer.as_deref(), Some(""), "closed without an answer");
    assert!(get(addr, "/metrics").starts_with("HTTP/1.1 200"));
}

#[test]
fn heads_and_bodies_past_their_caps_are_refused() {
    let addr = start(limits());
    let wait = Duration::from_secs(5);
    let mut long_line = b"GET /metrics?".to_vec();
    long_line.resize(9 * 1024, b'a');
    long_line.extend_from_slice(b" HTTP/1.1\r\n\r\n");
    let mut many = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    for (what, request) in [("a 9 KiB request line", long_line), ("40 headers", many)] {
        let answer = exchange(addr, &request, wait).expect("an answer");
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{what}: {answer}"
        );
    }
    let declared = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n";
    let chunked = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n{}\r\n0\r\n\r\n",
        "b".repeat(0x800)
    );
    for (what, request) in [
        ("a declared 5000-byte body", declared.to_vec()),
        ("a 2 KiB chunked body", chunked.into_bytes()),
    ] {
        let answer = exchange(addr, &request, wait).expect("an answer");
        assert!(
            answer.starts_with("HTTP/1.1 413 Payload Too Large\r\n"),
            "{what}: {answer}"
        );
    }
    let small = exchange(
        addr,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        wait,
    )
    .expect("an answer");
    assert!(
        small.starts_with("HTTP/1.1 200") && small.ends_with("\r\n\r\nhello"),
        "{small}"
    );
}

#[test]
fn connections_past_the_cap_are_closed_until_one_ends() {
    let addr = start(Limits {
        max_connections: 2,
        deadline: Duration::from_secs(30),
        header_timeout: Duration::from_secs(30),
        ..Limits::default()
    });
    let idle: Vec<_> = (0..2)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    // Once both idle connections hold their slots, a third is closed unanswered.
    let closed = (0..200).any(|_| get(addr, "/metrics").is_empty());
    assert!(closed, "a connection past the cap was served");
    drop(idle);
    let served = (0..200).any(|_| get(addr, "/metrics").starts_with("HTTP/1.1 200"));
    assert!(served, "the slots were not given back");
}

#[test]
fn head_drops_the_body_and_other_methods_get_405() {
    let addr = start(limits());
    let head = exchange(
        addr,
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        Duration::from_secs(5),
    )
    .expect("an answer");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("content-length: 21\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "no body: {head}");
    let put = exchange(
        addr,
        b"PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        Duration::from_secs(5),
    )
    .expect("an answer");
    assert!(put.starts_with("HTTP/1.1 405"), "{put}");
    assert!(put.contains("allow: GET, HEAD\r\n"), "{put}");
    assert!(get(addr, "/nope").starts_with("HTTP/1.1 404"));
}
