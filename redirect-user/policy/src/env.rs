//! Environment sources (process env, cluster.env, layering) and the passwd/group/resolv.conf text parsers.

use super::{EnvSource, PolicyError};
use std::collections::HashMap;
use std::net::IpAddr;

/// The process environment (`std::env`). A non-UTF-8 value is read lossily (each bad byte
/// becomes U+FFFD) so that the parser refuses it naming the variable, rather than taking the
/// variable as unset and capturing by istio's defaults.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StdEnv;

impl EnvSource for StdEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
    }
}

/// The process environment as an [`EnvSource`].
pub fn std_env() -> impl EnvSource {
    StdEnv
}

/// Two env sources, the first winning: e.g. the real env over a cluster.env.
#[derive(Debug, Clone)]
pub struct LayeredEnv<A, B>(pub A, pub B);

impl<A: EnvSource, B: EnvSource> EnvSource for LayeredEnv<A, B> {
    fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).or_else(|| self.1.get(name))
    }
}

/// Parse a cluster.env (`KEY='value'`, `KEY="value"`, `KEY=value`, optional `export `,
/// `#` comments and blank lines), as `istioctl x workload entry configure` writes it.
pub fn parse_cluster_env(text: &str) -> Result<HashMap<String, String>, PolicyError> {
    let mut out = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let err = |reason: &str| PolicyError::ClusterEnv {
            line: i + 1,
            reason: reason.to_string(),
            text: raw.to_string(),
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let (key, value) = line.split_once('=').ok_or_else(|| err("no '='"))?;
        let valid_key = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            return Err(err("not a variable name"));
        }
        let value = unquote(value).ok_or_else(|| err("unbalanced quotes"))?;
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

/// `'v'` -> `v` (literal), `"v"` -> `v` (with `\"` and `\\` unescaped), `v` -> `v`.
fn unquote(v: &str) -> Option<String> {
    if let Some(rest) = v.strip_prefix('\'') {
        let inner = rest.strip_suffix('\'')?;
        return (!inner.contains('\'')).then(|| inner.to_string());
    }
    if let Some(rest) = v.strip_prefix('"') {
        let inner = rest.strip_suffix('"')?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.push(chars.next()?),
                '"' => return None,
                c => out.push(c),
            }
        }
        return Some(out);
    }
    if v.contains(['\'', '"']) {
        return None;
    }
    Some(v.to_string())
}

/// The third field (uid or gid) of the `name:` line of /etc/passwd or /etc/group text.
pub(super) fn id_in_db(text: &str, name: &str) -> Option<u32> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let mut fields = l.split(':');
            (fields.next() == Some(name)).then(|| fields.nth(1))?
        })
        .and_then(|id| id.parse().ok())
}

/// The `nameserver` addresses of resolv.conf text, in order; unparsable entries are dropped.
pub(super) fn nameservers(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .filter_map(|a| a.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_env_forms() {
        let env = parse_cluster_env(
            "# comment\n\nA='x y'\nB=plain\nexport C=\"q\\\"d\"\nD=''\nE='{\"k\":\"v\"}'\n",
        )
        .unwrap();
        assert_eq!(env["A"], "x y");
        assert_eq!(env["B"], "plain");
        assert_eq!(env["C"], "q\"d");
        assert_eq!(env["D"], "");
        assert_eq!(env["E"], "{\"k\":\"v\"}");
    }

    #[test]
    fn cluster_env_errors_name_the_line() {
        let e = parse_cluster_env("A=1\nnot a line\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("not a line"), "{e}");
        let e = parse_cluster_env("A='open\n").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("quotes"), "{e}");
        let e = parse_cluster_env("1A=x\n").unwrap_err().to_string();
        assert!(e.contains("variable name"), "{e}");
    }

    #[test]
    fn layered_env_prefers_first() {
        let a: HashMap<String, String> = [("X".to_string(), "a".to_string())].into();
        let b: HashMap<String, String> = [
            ("X".to_string(), "b".to_string()),
            ("Y".to_string(), "b".to_string()),
        ]
        .into();
        let l = LayeredEnv(&a, &b);
        assert_eq!(l.get("X").as_deref(), Some("a"));
        assert_eq!(l.get("Y").as_deref(), Some("b"));
        assert_eq!(l.get("Z"), None);
    }

    #[test]
    fn passwd_group_and_resolv() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nistio-proxy:x:1337:1337::/home:/bin/sh\n";
        assert_eq!(id_in_db(passwd, "istio-proxy"), Some(1337));
        assert_eq!(id_in_db(passwd, "istio"), None);
        assert_eq!(id_in_db("java:x:1001:\n", "java"), Some(1001));
        let resolv = "# x\nsearch a b\nnameserver 10.96.0.10\nnameserver ::1\nnameserver \
            fe80::1%eth0\noptions ndots:5\n";
        assert_eq!(
            nameservers(resolv),
            vec![
                "10.96.0.10".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
    }
}
