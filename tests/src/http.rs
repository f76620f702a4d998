//! Minimal HTTP/1.0 client and fixed-response server for admin-port and metrics tests.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    time::Duration,
};

use redirect_testkit::{Listen, Netns};

/// Sends `METHOD path` to `addr` from inside `ns`; returns (status, body). Status 0 means the
/// connection failed (e.g. refused).
pub fn request(ns: &Netns, method: &str, addr: &str, path: &str) -> (u16, String) {
    let (method, addr, path) = (method.to_owned(), addr.to_owned(), path.to_owned());
    ns.run(move || {
        let Ok(mut s) =
            TcpStream::connect_timeout(&addr.parse().expect("addr"), Duration::from_secs(5))
        else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = write!(s, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        (status, body.to_owned())
    })
    .expect("enter the namespace")
}

/// `GET /metrics` from the host's namespace (a daemon's metrics port); panics unless 200 and
/// valid Prometheus text.
pub fn scrape(addr: &std::net::SocketAddr) -> String {
    let mut s = TcpStream::connect_timeout(addr, Duration::from_secs(5))
        .expect("connect to the metrics port");
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").expect("send");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    if let Err(e) = check_prometheus(body) {
        panic!("invalid exposition ({e}): {body}");
    }
    body.to_owned()
}

/// Serves `body` with status 200 to every request on `addr` inside `ns`, until the process ends.
pub fn serve_fixed(ns: &Netns, addr: &str, body: &'static str) {
    let listener = Listen::on(addr)
        .netns(ns)
        .tcp()
        .expect("bind the fixed server");
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

/// Checks Prometheus text exposition: every sample belongs to a family declared by a `# TYPE`
/// line before it, names and label syntax are valid, no family is declared twice, values parse.
pub fn check_prometheus(text: &str) -> Result<(), String> {
    let mut declared = std::collections::HashSet::new();
    let mut current: Option<String> = None;
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for (no, line) in text.lines().enumerate() {
        let no = no + 1;
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut p = rest.split_whitespace();
            let name = p
                .next()
                .ok_or(format!("line {no}: TYPE without name"))?
                .to_owned();
            let kind = p.next().ok_or(format!("line {no}: TYPE without type"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(format!("line {no}: unknown type {kind}"));
            }
            if !declared.insert(name.clone()) {
                return Err(format!("line {no}: family {name} declared twice"));
            }
            current = Some(name);
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or(format!("line {no}: no value: {line}"))?;
        value
            .parse::<f64>()
            .map_err(|_| format!("line {no}: bad value {value}"))?;
        let name = series.split('{').next().unwrap_or_default();
        if !valid_name(name) {
            return Err(format!("line {no}: bad metric name {name}"));
        }
        if let Some(labels) = series.strip_prefix(name) {
            let well_formed =
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}'));
            if !well_formed {
                return Err(format!("line {no}: bad labels {labels}"));
            }
        }
        let family_ok = current.as_deref().is_some_and(|f| {
            name == f
                || name
                    .strip_prefix(f)
                    .is_some_and(|s| ["_bucket", "_sum", "_count"].contains(&s))
        });
        if !family_ok {
            return Err(format!(
                "line {no}: sample {name} outside its # TYPE family"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_prometheus;

    #[test]
    fn accepts_valid_and_rejects_invalid() {
        assert!(check_prometheus("# TYPE a_total counter\na_total{x=\"1\"} 3\n").is_ok());
        assert!(check_prometheus("a_total 3\n").is_err());
        assert!(check_prometheus("# TYPE a counter\n# TYPE a counter\n").is_err());
        assert!(check_prometheus("# TYPE a gauge\na nope\n").is_err());
        assert!(check_prometheus("# TYPE 1a gauge\n1a 1\n").is_err());
    }
}
