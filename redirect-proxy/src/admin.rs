//! Admin HTTP endpoints: readiness (15021), own stats (15090), merged stats (15020), and the
//! local admin port (15000) with `POST /drain_listeners`.
use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

use crate::state::Shared;

/// What an admin listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `GET /healthz/ready` (15021).
    Readiness,
    /// `GET /stats/prometheus`: the proxy's own metrics (15090).
    Stats,
    /// `GET /stats/prometheus`: own + BPF decision counters + the application's metrics (15020).
    MergedStats,
    /// Local admin (15000): `POST /drain_listeners`, `GET /stats/prometheus`, `GET /ready`.
    Admin,
}

const TIMEOUT: Duration = Duration::from_secs(5);
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `role` on `listener` for ever.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, role: Role) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _ = tokio::time::timeout(TIMEOUT, handle(stream, &shared, role)).await;
        });
    }
}

async fn read_head(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf);
    let mut parts = text.lines().next()?.split_whitespace();
    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
}

async fn handle(mut stream: TcpStream, shared: &Shared, role: Role) {
    let Some((method, path)) = read_head(&mut stream).await else {
        return;
    };
    let (status, content_type, body) = match (role, method.as_str(), path.as_str()) {
        (Role::Readiness, "GET", "/healthz/ready") | (Role::Admin, "GET", "/ready") => {
            match shared.readiness() {
                Ok(()) => (200, "text/plain", "ready\n".to_owned()),
                Err(why) => (503, "text/plain", format!("not ready: {why}\n")),
            }
        }
        (Role::Stats | Role::Admin, "GET", "/stats/prometheus") => {
            (200, PROMETHEUS, shared.stats.render())
        }
        (Role::MergedStats, "GET", "/stats/prometheus") => (200, PROMETHEUS, merged(shared).await),
        (Role::Admin, "POST", "/drain_listeners") => {
            shared.drain();
            (200, "text/plain", "OK\n".to_owned())
        }
        _ => (404, "text/plain", format!("no {method} {path} here\n")),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn merged(shared: &Shared) -> String {
    let mut out = shared.stats.render();
    if let Some(path) = &shared.bpf_metrics_file {
        match tokio::fs::read_to_string(path).await {
            Ok(text) => out.push_str(&text),
            Err(e) => out.push_str(&format!(
                "# BPF metrics unavailable ({}): {e}\n",
                path.display()
            )),
        }
    }
    if let Some(url) = &shared.app_metrics {
        match scrape(url).await {
            Ok(text) => {
                out.push_str(&text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            Err(e) => out.push_str(&format!("# application metrics unavailable ({url}): {e}\n")),
        }
    }
    out
}

/// Splits `http://host:port/path` into (host:port, /path).
pub fn split_url(url: &str) -> Result<(&str, &str), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("'{url}' is not an http:// URL"))?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    })
}

async fn scrape(url: &str) -> Result<String, String> {
    let (authority, path) = split_url(url)?;
    let fetch = async {
        let mut s = TcpStream::connect(authority)
            .await
            .map_err(|e| e.to_string())?;
        let req = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nAccept: text/plain\r\n\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(String::from_utf8_lossy(&buf).into_owned())
    };
    let text = tokio::time::timeout(Duration::from_secs(2), fetch)
        .await
        .map_err(|_| "timed out".to_owned())??;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        return Err(format!("HTTP status {status}"));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:9091/metrics"),
            Ok(("127.0.0.1:9091", "/metrics"))
        );
        assert_eq!(
            split_url("http://127.0.0.1:9091"),
            Ok(("127.0.0.1:9091", "/"))
        );
        assert!(split_url("https://x/").is_err());
    }
}
