//! What the probe binaries say, as types: each prints (or answers) one JSON line of these and
//! the tests and the bench deserialize it; nobody splits strings.
use std::{fmt, net::SocketAddr};

use anyhow::Context as _;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// Every line of a probe's stdout as a `T`; fails naming the first line that is not one.
pub fn parse_lines<T: DeserializeOwned>(stdout: &[u8]) -> anyhow::Result<Vec<T>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("probe output line {l:?}")))
        .collect()
}

/// What `probe-listen` answers on a TCP connection or a UDP datagram: which listener took it,
/// the original destination it read (TCP only) and the peer it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landing {
    /// `NAME/LISTEN_ADDR` of the listener, e.g. `proxy/[::]:15001`.
    pub at: String,
    /// `SO_ORIGINAL_DST`, or the local address when there is none (TCP); `None` for UDP.
    pub orig: Option<SocketAddr>,
    /// The peer the listener saw (v4-mapped addresses shown as IPv4).
    pub peer: SocketAddr,
}

impl fmt::Display for Landing {
    /// `at=NAME/ADDR orig=DST` (`at=NAME/ADDR` for UDP): where it landed, without the peer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at={}", self.at)?;
        if let Some(orig) = self.orig {
            write!(f, " orig={orig}")?;
        }
        Ok(())
    }
}

/// One line of `probe-matrix`: one probe (`tcp:ADDR`, `udp:ADDR`, ...) and how it went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeResult {
    /// The probe as given on the command line.
    pub probe: String,
    /// It connected and a listener answered.
    pub ok: bool,
    /// The listener's answer.
    pub landing: Option<Landing>,
    /// The peer the client saw (`getpeername`, or the UDP reply's source).
    pub peer: Option<SocketAddr>,
    /// Why it failed: `refused`, `timeout`, `unreachable`, `reset`, `bad-reply`, `other:...`.
    pub error: Option<String>,
    /// The client's own address (TCP, once connected).
    #[serde(default)]
    pub local: Option<SocketAddr>,
}

impl ProbeResult {
    /// Where it landed (`at=... orig=...`), or "" when no listener answered.
    pub fn at(&self) -> String {
        self.landing
            .as_ref()
            .map(Landing::to_string)
            .unwrap_or_default()
    }

    /// What must agree between two captures of the same connection: the listener and the
    /// original destination it acted on, or how the attempt failed; and the client's peer.
    pub fn outcome(&self) -> String {
        if !self.ok {
            return format!("failed:{}", self.error.as_deref().unwrap_or("?"));
        }
        let peer = self.peer.map(|p| p.to_string()).unwrap_or_default();
        format!("{} client-peer={peer}", self.at())
    }
}

/// What the line echo server (`probe-server`, the tests' `EchoServer`) answers: its tag, the
/// peer it saw and the line it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Echo {
    /// The server's tag.
    pub tag: String,
    /// The peer the server saw.
    pub peer: SocketAddr,
    /// The first line the client sent.
    pub got: String,
}

/// Counts of a `probe-client --count N` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Connections that completed.
    pub ok: u32,
    /// Connections that failed.
    pub failed: u32,
}

/// The line `probe-client` prints: one connection (line or HTTP), or the counts of many.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientResult {
    /// It connected and read an answer (with `--count`: every connection did).
    pub ok: bool,
    /// Why it failed (with `--count`: the first failure).
    pub error: Option<String>,
    /// The socket's local address.
    pub local: Option<SocketAddr>,
    /// The socket's peer (`getpeername`).
    pub peer: Option<SocketAddr>,
    /// The echo server's answer; `None` when the connection closed without one.
    pub reply: Option<Echo>,
    /// Bytes of the answer line, newline included.
    pub reply_bytes: u64,
    /// `--http`: the response status.
    pub status: Option<u16>,
    /// `--http`: the response body.
    pub body: Option<String>,
    /// `--count`: how the connections went.
    pub counts: Option<Counts>,
}

impl ClientResult {
    /// A failed attempt.
    pub fn failed(error: impl fmt::Display) -> Self {
        Self {
            error: Some(error.to_string()),
            ..Self::default()
        }
    }
}

/// One line of `probe-load` (the benchmark's server and clients).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Load {
    /// `server`: listening.
    Listening {
        /// Where.
        addr: SocketAddr,
    },
    /// `until-captured`: the probing loop has started.
    Probing {
        /// What it dials.
        addr: SocketAddr,
    },
    /// `cps`: short connections.
    Cps {
        /// Completed connections.
        connections: u64,
        /// Failed connections.
        errors: u64,
        /// Wall time.
        seconds: f64,
        /// Connections per second.
        per_second: f64,
        /// The client's CPU time.
        cpu_ms: f64,
    },
    /// `keepalive`: requests on persistent connections.
    Keepalive {
        /// Completed requests.
        requests: u64,
        /// Requests per second.
        per_second: f64,
        /// Latency percentiles, microseconds.
        p50_us: f64,
        /// 90th percentile.
        p90_us: f64,
        /// 99th percentile.
        p99_us: f64,
        /// Wall time.
        seconds: f64,
        /// The client's CPU time.
        cpu_ms: f64,
    },
    /// `bulk`: one connection's throughput.
    Bulk {
        /// Bytes sent (and counted by the server).
        bytes: u64,
        /// Wall time.
        seconds: f64,
        /// Throughput.
        mib_per_second: f64,
        /// The client's CPU time.
        cpu_ms: f64,
    },
    /// `until-captured`: the result.
    UntilCaptured {
        /// The capture detector answered.
        captured: bool,
        /// Wall-clock time of the first captured connection, microseconds since the epoch.
        unix_us: Option<u64>,
        /// Connections tried.
        attempts: u64,
    },
}

impl Load {
    /// The client's CPU milliseconds (0 for lines that carry none).
    pub fn cpu_ms(&self) -> f64 {
        match self {
            Self::Cps { cpu_ms, .. }
            | Self::Keepalive { cpu_ms, .. }
            | Self::Bulk { cpu_ms, .. } => *cpu_ms,
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("addr")
    }

    #[test]
    fn a_landing_reads_like_at_and_orig() {
        let tcp = Landing {
            at: "proxy/[::]:15001".into(),
            orig: Some(addr("192.0.2.10:80")),
            peer: addr("10.200.0.2:40000"),
        };
        assert_eq!(tcp.to_string(), "at=proxy/[::]:15001 orig=192.0.2.10:80");
        let udp = Landing { orig: None, ..tcp };
        assert_eq!(udp.to_string(), "at=proxy/[::]:15001");
    }

    #[test]
    fn outcomes_name_the_failure_or_the_landing_and_peer() {
        let line = r#"{"probe":"tcp:192.0.2.10:80","ok":true,"landing":{"at":"world/192.0.2.10:80","orig":"192.0.2.10:80","peer":"10.200.0.2:1"},"peer":"192.0.2.10:80","error":null}"#;
        let r: ProbeResult = serde_json::from_str(line).expect("parses");
        assert_eq!(r.at(), "at=world/192.0.2.10:80 orig=192.0.2.10:80");
        assert_eq!(
            r.outcome(),
            "at=world/192.0.2.10:80 orig=192.0.2.10:80 client-peer=192.0.2.10:80"
        );
        let failed = ProbeResult {
            ok: false,
            landing: None,
            peer: None,
            error: Some("refused".into()),
            ..r
        };
        assert_eq!(failed.outcome(), "failed:refused");
        assert_eq!(failed.at(), "");
    }

    #[test]
    fn results_round_trip() {
        let r = ClientResult {
            ok: true,
            local: Some(addr("127.0.0.1:40123")),
            peer: Some(addr("[::ffff:198.18.0.2]:7009")),
            reply: Some(Echo {
                tag: "srv".into(),
                peer: addr("198.18.0.1:5"),
                got: "hi".into(),
            }),
            reply_bytes: 42,
            ..ClientResult::default()
        };
        let text = serde_json::to_string(&r).expect("json");
        assert_eq!(
            serde_json::from_str::<ClientResult>(&text).expect("back"),
            r
        );
        let load = Load::Cps {
            connections: 3,
            errors: 0,
            seconds: 1.0,
            per_second: 3.0,
            cpu_ms: 2.5,
        };
        let text = serde_json::to_string(&load).expect("json");
        assert!(text.starts_with(r#"{"kind":"cps","#), "{text}");
        let back: Load = serde_json::from_str(&text).expect("back");
        assert_eq!(back.cpu_ms(), 2.5);
        assert_eq!(
            ClientResult::failed("refused").error.as_deref(),
            Some("refused")
        );
    }

    #[test]
    fn parse_lines_names_a_bad_line() {
        let good = parse_lines::<Counts>(b"{\"ok\":1,\"failed\":0}\n").expect("parses");
        assert_eq!(good, [Counts { ok: 1, failed: 0 }]);
        let e = parse_lines::<Counts>(b"{\"ok\":1,\"failed\":0}\nready\n").expect_err("bad");
        assert!(format!("{e:#}").contains("\"ready\""), "{e:#}");
    }
}
