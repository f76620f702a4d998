//! The fuzz targets' stub system, the table of istio-iptables flags they aim at, and checks.
use std::collections::HashMap;

use redirect_policy::{
    parse_invocation, Id, Invocation, LookupError, PolicyError, SystemLookup, View,
};

/// Groups `java` (1001) and `ftp` (14), no users, and a resolv.conf naming one server.
#[derive(Debug, Default)]
pub(crate) struct Stub;

fn listed(found: Option<u32>, file: &str) -> Result<Id, LookupError> {
    Ok(match found {
        Some(id) => Id::Found {
            id,
            from: file.into(),
        },
        None => Id::NotListed {
            searched: file.into(),
        },
    })
}

impl SystemLookup for Stub {
    fn group_gid(&self, name: &str) -> Result<Id, LookupError> {
        let gid = match name {
            "java" => Some(1001),
            "ftp" => Some(14),
            _ => None,
        };
        listed(gid, "/etc/group")
    }

    fn user_uid(&self, _: &str) -> Result<Id, LookupError> {
        listed(None, "/etc/passwd")
    }

    fn resolv_conf(&self) -> Result<View, LookupError> {
        Ok(View {
            text: "nameserver 10.96.0.10\n".into(),
            from: "/etc/resolv.conf".into(),
        })
    }
}

/// What a flag's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Port,
    Ports,
    PortsOrStar,
    Ids,
    Mode,
    Ifaces,
    Cidrs,
    CidrsNoStar,
    Bool,
    Ips,
    NoProxy,
    /// Any string (a path or a name).
    Free,
}

/// One istio-iptables flag: short name, long name, env var, value kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flag {
    pub short: Option<char>,
    pub long: &'static str,
    pub env: Option<&'static str>,
    pub kind: Kind,
}

impl Flag {
    /// As errors name it: `-p/--envoy-port` or `--redirect-dns`.
    pub(crate) fn label(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }
}

const fn flag(
    short: Option<char>,
    long: &'static str,
    env: Option<&'static str>,
    kind: Kind,
) -> Flag {
    Flag {
        short,
        long,
        env,
        kind,
    }
}

/// Every flag with a meaning (the ignored ones are in [`IGNORED`]).
#[rustfmt::skip]
pub(crate) const FLAGS: &[Flag] = &[
    flag(Some('p'), "envoy-port", None, Kind::Port),
    flag(Some('z'), "inbound-capture-port", Some("INBOUND_CAPTURE_PORT"), Kind::Port),
    flag(Some('e'), "inbound-tunnel-port", Some("INBOUND_TUNNEL_PORT"), Kind::Port),
    flag(Some('u'), "proxy-uid", Some("PROXY_UID"), Kind::Ids),
    flag(Some('g'), "proxy-gid", Some("PROXY_GID"), Kind::Ids),
    flag(Some('m'), "istio-inbound-interception-mode", Some("ISTIO_INBOUND_INTERCEPTION_MODE"), Kind::Mode),
    flag(Some('b'), "istio-inbound-ports", Some("ISTIO_INBOUND_PORTS"), Kind::PortsOrStar),
    flag(Some('d'), "istio-local-exclude-ports", Some("ISTIO_LOCAL_EXCLUDE_PORTS"), Kind::Ports),
    flag(Some('c'), "istio-exclude-interfaces", Some("ISTIO_EXCLUDE_INTERFACES"), Kind::Ifaces),
    flag(Some('i'), "istio-service-cidr", Some("ISTIO_SERVICE_CIDR"), Kind::Cidrs),
    flag(Some('x'), "istio-service-exclude-cidr", Some("ISTIO_SERVICE_EXCLUDE_CIDR"), Kind::CidrsNoStar),
    flag(Some('q'), "istio-outbound-ports", Some("ISTIO_OUTBOUND_PORTS"), Kind::Ports),
    flag(Some('o'), "istio-local-outbound-ports-exclude", Some("ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE"), Kind::Ports),
    flag(Some('k'), "kube-virt-interfaces", Some("KUBE_VIRT_INTERFACES"), Kind::Ifaces),
    flag(Some('n'), "dry-run", Some("DRY_RUN"), Kind::Bool),
    flag(None, "skip-rule-apply", Some("SKIP_RULE_APPLY"), Kind::Bool),
    flag(None, "redirect-dns", Some("REDIRECT_DNS"), Kind::Bool),
    flag(None, "capture-all-dns", Some("CAPTURE_ALL_DNS"), Kind::Bool),
    flag(None, "drop-invalid", Some("DROP_INVALID"), Kind::Bool),
    flag(None, "dual-stack", Some("DUAL_STACK"), Kind::Bool),
    flag(None, "cleanup-only", Some("CLEANUP_ONLY"), Kind::Bool),
    flag(None, "run-validation", Some("RUN_VALIDATION"), Kind::Bool),
    flag(None, "network-namespace", Some("NETWORK_NAMESPACE"), Kind::Free),
    flag(None, "netns", None, Kind::Free),
    flag(None, "cgroup", None, Kind::Free),
    flag(None, "bind-proxy-cgroup", None, Kind::Free),
    flag(None, "no-proxy", None, Kind::NoProxy),
    flag(None, "bpffs", None, Kind::Free),
    flag(None, "cluster-env", None, Kind::Free),
    flag(None, "dns-servers", None, Kind::Ips),
];

/// Accepted and ignored: (long name, takes a value).
pub(crate) const IGNORED: &[(&str, bool)] = &[
    ("istio-inbound-tproxy-mark", true),
    ("istio-inbound-tproxy-route-table", true),
    ("iptables-probe-port", true),
    ("probe-timeout", true),
    ("iptables-trace-logging", false),
    ("cni-mode", false),
    ("reconcile", false),
    ("log_output_level", true),
    ("log_as_json", false),
];

/// The environment variables istio-iptables reads besides the flags' own.
pub(crate) const OTHER_ENV: &[&str] = &[
    "ISTIO_META_DNS_CAPTURE",
    "INVALID_DROP",
    "ISTIO_DUAL_STACK",
    "ISTIO_OUTBOUND_OWNER_GROUPS",
    "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE",
    "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR",
    "ENVOY_USER",
];

/// Parses `args` under `env` with the [`Stub`] system.
pub(crate) fn run(
    args: &[String],
    env: &HashMap<String, String>,
) -> Result<Invocation, PolicyError> {
    parse_invocation(args, env, &Stub)
}

/// istio's list split: on `,`, empty items dropped.
pub(crate) fn items(v: &str) -> Vec<&str> {
    v.split(',').filter(|i| !i.is_empty()).collect()
}

/// A port as istio-iptables reads it: ASCII digits only, 1-65535.
pub(crate) fn port_ok(v: &str) -> bool {
    !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && matches!(v.parse::<u16>(), Ok(1..))
}
