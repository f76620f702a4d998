//! The access log: one line per connection, Envoy-like text or JSON.
use std::time::SystemTime;

use serde::Serialize;

/// Access log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `[start] direction orig_dst cluster flags up down duration peer upstream`
    #[default]
    Text,
    /// One JSON object per line.
    Json,
    /// No access log (Istio's default); metrics still count every connection.
    Off,
}

/// One finished connection.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Record {
    /// Always "access", so JSON consumers can tell these lines from the rest.
    pub kind: &'static str,
    /// Start time, RFC 3339 UTC with milliseconds.
    pub start_time: String,
    /// `outbound` or `inbound`.
    pub direction: &'static str,
    /// Who connected to the proxy.
    pub peer: String,
    /// Original destination, or "-".
    pub orig_dst: String,
    /// Cluster name, or "-".
    pub cluster: String,
    /// Where the proxy connected, or "-".
    pub upstream: String,
    /// Bytes client -> upstream.
    pub bytes_up: u64,
    /// Bytes upstream -> client.
    pub bytes_down: u64,
    /// Milliseconds.
    pub duration_ms: u64,
    /// Envoy response flags: `-` none, `UF` upstream connect failure, `NR` no route
    /// (blackhole, or no original destination), `DC` connection ended with an error.
    pub flags: &'static str,
}

/// Formats a `SystemTime` as RFC 3339 UTC with milliseconds, without a date crate.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), valid for the Unix era.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_millis()
    )
}

impl Record {
    /// The line as written to stdout.
    pub(crate) fn line(&self, format: Format) -> String {
        match format {
            Format::Off => String::new(),
            Format::Json => serde_json::to_string(self).unwrap_or_default(),
            Format::Text => format!(
                "[{}] {} {} {} {} {} {} {}ms {} {}",
                self.start_time,
                self.direction,
                self.orig_dst,
                self.cluster,
                self.flags,
                self.bytes_up,
                self.bytes_down,
                self.duration_ms,
                self.peer,
                self.upstream
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_796_247_056_744);
        assert_eq!(rfc3339(t), "2026-12-02T21:30:56.744Z");
        let leap = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn text_and_json_lines() {
        let r = Record {
            kind: "access",
            start_time: "2026-11-29T21:30:56.744Z".into(),
            direction: "outbound",
            peer: "127.0.0.1:1".into(),
            orig_dst: "198.18.0.2:80".into(),
            cluster: "PassthroughCluster".into(),
            upstream: "198.18.0.2:80".into(),
            bytes_up: 3,
            bytes_down: 4,
            duration_ms: 5,
            flags: "-",
        };
        assert_eq!(
            r.line(Format::Text),
            "[2026-11-29T21:30:56.744Z] outbound 198.18.0.2:80 PassthroughCluster - 3 4 5ms 127.0.0.1:1 198.18.0.2:80"
        );
        let v: serde_json::Value = serde_json::from_str(&r.line(Format::Json)).expect("json");
        assert_eq!(v["cluster"], "PassthroughCluster");
        assert_eq!(v["kind"], "access");
    }
}
