//! BlackHoleCluster: plaintext HTTP/1.x gets `503 no healthy upstream`; anything else is closed.
use std::time::Duration;

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

/// Body Envoy sends when a cluster has no healthy upstream.
pub(crate) const BODY: &str = "no healthy upstream";
/// How long to wait for a client to speak before closing.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_HEAD: usize = 16 * 1024;

/// True when `buf` starts like an HTTP/1.x request line (`TOKEN SP target SP HTTP/1.`), as
/// far as it goes. `complete` asks for a whole request line.
pub(crate) fn looks_like_http1(buf: &[u8], complete: bool) -> bool {
    let line_end = buf.windows(2).position(|w| w == b"\r\n");
    let line = match line_end {
        Some(end) => &buf[..end],
        None if complete => return false,
        None => buf,
    };
    let mut parts = line.splitn(3, |b| *b == b' ');
    let method = parts.next().unwrap_or_default();
    if method.is_empty() || !method.iter().all(u8::is_ascii_uppercase) {
        return false;
    }
    match (parts.next(), parts.next()) {
        (Some(target), Some(version)) => {
            !target.is_empty()
                && (version.starts_with(b"HTTP/1.")
                    || (!complete && b"HTTP/1.".starts_with(version)))
        }
        _ => !complete,
    }
}

/// Answers or closes a blackholed connection. Returns (bytes read, bytes written).
pub(crate) async fn respond(mut client: TcpStream) -> (u64, u64) {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let read = tokio::time::timeout(SNIFF_TIMEOUT, client.read(&mut chunk)).await;
        let n = match read {
            Ok(Ok(n)) if n > 0 => n,
            _ => return (buf.len() as u64, 0),
        };
        buf.extend_from_slice(&chunk[..n]);
        if !looks_like_http1(&buf, false) || buf.len() > MAX_HEAD {
            return (buf.len() as u64, 0);
        }
        if buf.windows(4).any(|w| w == b"\r\n\r\n") && looks_like_http1(&buf, true) {
            break;
        }
    }
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: {}\r\ncontent-type: \
            text/plain\r\nconnection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let written = client
        .write_all(response.as_bytes())
        .await
        .map_or(0, |()| response.len() as u64);
    let _ = client.shutdown().await;
    (buf.len() as u64, written)
}

#[cfg(test)]
mod tests {
    use super::looks_like_http1;

    #[test]
    fn recognises_http1_requests() {
        assert!(looks_like_http1(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", true));
        assert!(looks_like_http1(b"POST /a?b HTTP/1.0\r\n", true));
        assert!(looks_like_http1(b"GE", false));
        assert!(looks_like_http1(b"GET /x HT", false));
    }

    #[test]
    fn rejects_other_protocols() {
        assert!(
            !looks_like_http1(b"\x16\x03\x01\x02\x00", false),
            "TLS client hello"
        );
        assert!(!looks_like_http1(b"hello\n", true));
        assert!(!looks_like_http1(b"PRI * HTTP/2.0\r\n", true), "h2 preface");
        assert!(!looks_like_http1(b"get / HTTP/1.1\r\n", true));
    }
}
