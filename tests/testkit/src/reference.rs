//! Istio's reference data vendored in `tests/data/istio` (goldens, cases, kube-inject manifests,
//! a VM cluster.env): the one place that knows where it lives and how its files are laid out.
use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

/// The base istio-iptables arguments of every row of `capture-cases.tsv` (its header says so).
pub const CASE_BASE_ARGS: &str = "-p 15001 -z 15006 -e 15008 -u 1337 -g 1337 -m REDIRECT";

/// `<repo>/tests/data/istio`.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/istio")
}

/// The text of `rel` under [`dir`]; panics naming the file (test support only).
pub fn read(rel: &str) -> String {
    let path = dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// One row of `capture-cases.tsv`, as written (no mapping of ranges or group names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Row name = golden file name without `.golden`.
    pub name: String,
    /// The row's own istio-iptables arguments (beyond [`CASE_BASE_ARGS`]), as one string.
    pub row_args: String,
    /// The row's environment, `KEY=VALUE` pairs.
    pub env: Vec<(String, String)>,
    /// The notes column.
    pub notes: String,
    /// DNS servers named in the notes.
    pub dns: Vec<IpAddr>,
    /// The pod is dual-stack (`ipv6=1`).
    pub ipv6: bool,
    /// A TPROXY row (mangle table inbound).
    pub tproxy: bool,
}

impl Case {
    /// The whole argument list: the base, then the row's.
    pub fn args(&self) -> Vec<String> {
        CASE_BASE_ARGS
            .split_whitespace()
            .chain(self.row_args.split_whitespace())
            .map(str::to_owned)
            .collect()
    }
}

/// Every row of `capture-cases.tsv`.
pub fn cases() -> Vec<Case> {
    parse_cases(&read("capture-cases.tsv"))
}

fn parse_cases(text: &str) -> Vec<Case> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let col = |i: usize| cols.get(i).copied().unwrap_or("");
            let row_args = match col(1) {
                "(none)" => String::new(),
                a => a.to_owned(),
            };
            let env = match col(2) {
                "-" | "" => Vec::new(),
                e => e
                    .split(' ')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').expect("environment column is KEY=VALUE");
                        (k.to_owned(), v.to_owned())
                    })
                    .collect(),
            };
            let notes = col(3).to_owned();
            let dns = notes
                .split([' ', ';', ','])
                .filter_map(|w| w.parse().ok())
                .collect();
            Case {
                name: col(0).to_owned(),
                ipv6: notes.contains("ipv6=1"),
                tproxy: row_args.contains("TPROXY"),
                row_args,
                env,
                notes,
                dns,
            }
        })
        .collect()
}

/// A golden split into its iptables-restore halves; harness markers dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Golden {
    /// The IPv4 `iptables-restore` input (the first run of `* table ... COMMIT` blocks).
    pub v4: String,
    /// The IPv6 input, when the golden repeats the tables for ip6tables.
    pub v6: Option<String>,
}

/// The golden of case `name`.
pub fn golden(name: &str) -> Golden {
    split_golden(&read(&format!("capture-golden/{name}.golden")))
}

/// Splits golden text: a table name seen again starts the IPv6 half.
pub fn split_golden(text: &str) -> Golden {
    let mut halves: Vec<String> = vec![String::new()];
    let mut seen: Vec<&str> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(table) = line.strip_prefix("* ") {
            if seen.contains(&table) {
                halves.push(String::new());
                seen.clear();
            }
            seen.push(table);
            inside = true;
        }
        if inside {
            let half = halves.last_mut().expect("one half at least");
            half.push_str(line);
            half.push('\n');
        }
        if line == "COMMIT" {
            inside = false;
        }
    }
    let v6 = halves.get(1).cloned().filter(|h| !h.is_empty());
    Golden {
        v4: halves.swap_remove(0),
        v6,
    }
}

/// Every vendored kube-inject manifest, by the name [`inject`] takes.
pub const INJECT_MANIFESTS: [&str; 6] = [
    "hello.yaml",
    "hello-probes.yaml",
    "hello-tproxy.yaml",
    "hello.proxyHoldsApplication.yaml",
    "kubevirtInterfaces.yaml",
    "traffic-params.yaml",
];

/// A kube-inject manifest, e.g. `inject("hello.yaml")` for `inject/hello.yaml.injected`.
pub fn inject(name: &str) -> String {
    read(&format!("inject/{name}.injected"))
}

/// The istio-init container's arguments after `- istio-iptables` (empty when it has none).
pub fn istio_init_args(manifest: &str) -> Vec<String> {
    let lines: Vec<&str> = manifest.lines().collect();
    let Some(start) = lines.iter().position(|l| l.trim() == "- istio-iptables") else {
        return Vec::new();
    };
    lines[start + 1..]
        .iter()
        .map_while(|l| l.trim().strip_prefix("- "))
        .map(|v| {
            let quoted = v.len() >= 2 && (v.starts_with('\'') || v.starts_with('"'));
            if quoted { &v[1..v.len() - 1] } else { v }.to_owned()
        })
        .collect()
}

/// The VM's `cluster.env`.
pub fn vm_cluster_env() -> String {
    read("vm-cluster.env")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_has_its_golden() {
        let cases = cases();
        assert_eq!(cases.len(), 27);
        for case in &cases {
            let g = golden(&case.name);
            assert!(g.v4.contains("COMMIT"), "{}", case.name);
            assert_eq!(g.v6.is_some(), case.ipv6, "{}: v6 half", case.name);
        }
    }

    #[test]
    fn notes_name_dns_servers() {
        let case = cases()
            .into_iter()
            .find(|c| c.name == "dns-uid-gid")
            .unwrap();
        let want: Vec<IpAddr> = vec![
            "127.0.0.53".parse().unwrap(),
            "::127.0.0.53".parse().unwrap(),
        ];
        assert_eq!(case.dns, want);
        assert_eq!(case.args()[0], "-p");
    }

    #[test]
    fn hello_has_istio_init_args() {
        let args = istio_init_args(&inject("hello.yaml"));
        assert_eq!(args.first().map(String::as_str), Some("-p"));
        assert!(args.iter().any(String::is_empty), "-x \"\" is in {args:?}");
    }
}
