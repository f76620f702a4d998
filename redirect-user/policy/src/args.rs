//! pflag-style parsing of istio-iptables arguments and their env bindings (CLI > alias env > env > default).

use std::collections::HashMap;

use super::{convert, EnvSource, Invocation, PolicyError, SystemLookup};

/// What a flag sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Key {
    EnvoyPort,
    CapturePort,
    TunnelPort,
    ProxyUid,
    ProxyGid,
    Mode,
    InboundPorts,
    InboundExclude,
    ExcludeIfaces,
    ServiceCidr,
    ExcludeCidr,
    OutboundPorts,
    OutboundExclude,
    KubeVirt,
    DryRun,
    SkipRuleApply,
    RedirectDns,
    CaptureAllDns,
    DropInvalid,
    DualStack,
    CleanupOnly,
    RunValidation,
    ProbePort,
    ProbeTimeout,
    NetworkNamespace,
    Netns,
    Cgroup,
    ProxyCgroup,
    NoProxy,
    Bpffs,
    ClusterEnv,
    DnsServers,
    /// Accepted and recorded in [`Invocation::ignored`].
    Ignored,
}

/// One flag: its names, whether it takes a value, the env vars bound to it, what it sets.
#[derive(Debug)]
pub(super) struct Flag {
    short: Option<char>,
    long: &'static str,
    takes_value: bool,
    env: Option<&'static str>,
    alias: Option<&'static str>,
    key: Key,
}

impl Flag {
    /// `-i/--istio-service-cidr`, or `--redirect-dns` for a flag without a short form.
    pub(super) fn label(&self) -> String {
        match self.short {
            Some(c) => format!("-{c}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }
}

const fn f(
    short: Option<char>,
    long: &'static str,
    takes_value: bool,
    env: Option<&'static str>,
    alias: Option<&'static str>,
    key: Key,
) -> Flag {
    Flag {
        short,
        long,
        takes_value,
        env,
        alias,
        key,
    }
}

const V: bool = true;
const B: bool = false;

/// Every flag istio-iptables accepts, plus ours.
#[rustfmt::skip]
const FLAGS: &[Flag] = &[
    f(Some('p'), "envoy-port", V, None, None, Key::EnvoyPort),
    f(Some('z'), "inbound-capture-port", V, Some("INBOUND_CAPTURE_PORT"), None, Key::CapturePort),
    f(Some('e'), "inbound-tunnel-port", V, Some("INBOUND_TUNNEL_PORT"), None, Key::TunnelPort),
    f(Some('u'), "proxy-uid", V, Some("PROXY_UID"), None, Key::ProxyUid),
    f(Some('g'), "proxy-gid", V, Some("PROXY_GID"), None, Key::ProxyGid),
    f(Some('m'), "istio-inbound-interception-mode", V, Some("ISTIO_INBOUND_INTERCEPTION_MODE"), None, Key::Mode),
    f(Some('b'), "istio-inbound-ports", V, Some("ISTIO_INBOUND_PORTS"), None, Key::InboundPorts),
    f(Some('d'), "istio-local-exclude-ports", V, Some("ISTIO_LOCAL_EXCLUDE_PORTS"), None, Key::InboundExclude),
    f(Some('c'), "istio-exclude-interfaces", V, Some("ISTIO_EXCLUDE_INTERFACES"), None, Key::ExcludeIfaces),
    f(Some('i'), "istio-service-cidr", V, Some("ISTIO_SERVICE_CIDR"), None, Key::ServiceCidr),
    f(Some('x'), "istio-service-exclude-cidr", V, Some("ISTIO_SERVICE_EXCLUDE_CIDR"), None, Key::ExcludeCidr),
    f(Some('q'), "istio-outbound-ports", V, Some("ISTIO_OUTBOUND_PORTS"), None, Key::OutboundPorts),
    f(Some('o'), "istio-local-outbound-ports-exclude", V,
        Some("ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE"), None, Key::OutboundExclude),
    f(Some('k'), "kube-virt-interfaces", V, Some("KUBE_VIRT_INTERFACES"), None, Key::KubeVirt),
    f(Some('n'), "dry-run", B, Some("DRY_RUN"), None, Key::DryRun),
    f(None, "skip-rule-apply", B, Some("SKIP_RULE_APPLY"), None, Key::SkipRuleApply),
    f(None, "redirect-dns", B, Some("REDIRECT_DNS"), Some("ISTIO_META_DNS_CAPTURE"), Key::RedirectDns),
    f(None, "capture-all-dns", B, Some("CAPTURE_ALL_DNS"), None, Key::CaptureAllDns),
    f(None, "drop-invalid", B, Some("DROP_INVALID"), Some("INVALID_DROP"), Key::DropInvalid),
    f(None, "dual-stack", B, Some("DUAL_STACK"), Some("ISTIO_DUAL_STACK"), Key::DualStack),
    f(None, "cleanup-only", B, Some("CLEANUP_ONLY"), None, Key::CleanupOnly),
    f(None, "run-validation", B, Some("RUN_VALIDATION"), None, Key::RunValidation),
    f(None, "iptables-probe-port", V, Some("IPTABLES_PROBE_PORT"), None, Key::ProbePort),
    f(None, "probe-timeout", V, Some("PROBE_TIMEOUT"), None, Key::ProbeTimeout),
    f(None, "network-namespace", V, Some("NETWORK_NAMESPACE"), None, Key::NetworkNamespace),
    // Ours.
    f(None, "netns", V, None, None, Key::Netns),
    f(None, "cgroup", V, None, None, Key::Cgroup),
    f(None, "bind-proxy-cgroup", V, None, None, Key::ProxyCgroup),
    f(None, "no-proxy", V, None, None, Key::NoProxy),
    f(None, "bpffs", V, None, None, Key::Bpffs),
    f(None, "cluster-env", V, None, None, Key::ClusterEnv),
    f(None, "dns-servers", V, None, None, Key::DnsServers),
    // Accepted, no effect here: TPROXY routing, apply mechanics, logging.
    f(Some('t'), "istio-inbound-tproxy-mark", V, None, None, Key::Ignored),
    f(Some('r'), "istio-inbound-tproxy-route-table", V, None, None, Key::Ignored),
    f(None, "iptables-trace-logging", B, None, None, Key::Ignored),
    f(None, "cni-mode", B, None, None, Key::Ignored),
    f(None, "reconcile", B, None, None, Key::Ignored),
    f(None, "force-apply", B, None, None, Key::Ignored),
    f(None, "native-nftables", B, None, None, Key::Ignored),
    f(None, "force-iptables-binary", B, None, None, Key::Ignored),
    f(None, "log_output_level", V, None, None, Key::Ignored),
    f(None, "log_stacktrace_level", V, None, None, Key::Ignored),
    f(None, "log_caller", V, None, None, Key::Ignored),
    f(None, "log_target", V, None, None, Key::Ignored),
    f(None, "log_rotate", V, None, None, Key::Ignored),
    f(None, "log_rotate_max_age", V, None, None, Key::Ignored),
    f(None, "log_rotate_max_size", V, None, None, Key::Ignored),
    f(None, "log_rotate_max_backups", V, None, None, Key::Ignored),
    f(None, "log_as_json", B, None, None, Key::Ignored),
];

/// Flags of ours that were renamed: old name -> new name and why.
const RENAMED: &[(&str, &str, &str)] = &[(
    "proxy-cgroup",
    "bind-proxy-cgroup",
    "it binds the -u/-g bypass to the proxy's cgroup; `--proxy-cgroup` of `daemon` and `attach` is \
        where the proxy hooks attach",
)];

/// The error for `--NAME` that is not a flag: a renamed flag's new name, else the closest one.
fn unknown_long(name: &str) -> PolicyError {
    if let Some((_, new, why)) = RENAMED.iter().find(|(old, _, _)| *old == name) {
        return PolicyError::UnknownFlag(format!("--{name} (renamed --{new}: {why})"));
    }
    let hint = crate::suggest::closest(name, FLAGS.iter().map(|f| f.long))
        .map_or_else(String::new, |k| format!(" (did you mean --{k}?)"));
    PolicyError::UnknownFlag(format!("--{name}{hint}"))
}

/// A value and where it came from, for error messages.
#[derive(Debug, Clone)]
pub(super) struct Raw {
    pub(super) value: String,
    /// `-i/--istio-service-cidr` or `-i/--istio-service-cidr ($ISTIO_SERVICE_CIDR)`.
    pub(super) origin: String,
}

/// The resolved raw value of every flag that has one (CLI, else alias env, else env).
#[derive(Debug, Default)]
pub(super) struct Values(HashMap<Key, Raw>);

impl Values {
    pub(super) fn get(&self, key: Key) -> Option<&Raw> {
        self.0.get(&key)
    }
}

/// Parse everything after `istio-iptables` (a leading `istio-iptables` is skipped too).
pub fn parse_invocation(
    args: &[String],
    env: &dyn EnvSource,
    sys: &dyn SystemLookup,
) -> Result<Invocation, PolicyError> {
    let (cli, ignored) = scan(args)?;
    let mut values = Values::default();
    for flag in FLAGS.iter().filter(|f| f.key != Key::Ignored) {
        let from_env = |name: &'static str| {
            env.get(name).map(|value| Raw {
                value,
                origin: format!("{} (${name})", flag.label()),
            })
        };
        let raw = cli
            .get(&flag.key)
            .cloned()
            .or_else(|| flag.alias.and_then(from_env))
            .or_else(|| flag.env.and_then(from_env));
        if let Some(raw) = raw {
            values.0.insert(flag.key, raw);
        }
    }
    convert::invocation(&values, ignored, env, sys)
}

/// TPROXY mode's mark and route table: the kernel programs match Istio's mark (1337) and the
/// policy routing uses Istio's table (133), so another value would half-apply (the rule made,
/// the mark never matched); it is refused instead of ignored.
fn fixed_default(flag: &Flag, value: &str) -> Result<(), PolicyError> {
    let default = match flag.short {
        Some('t') => "1337",
        Some('r') => "133",
        _ => return Ok(()),
    };
    if value.trim() == default {
        return Ok(());
    }
    Err(PolicyError::Invalid {
        flag: flag.label(),
        value: value.to_owned(),
        reason: format!(
            "is not Istio's default {default}, the only value supported (TPROXY mode's \
            mark 1337 and route table 133 are built in): leave the flag out or pass {default}"
        ),
    })
}

/// Walk argv: the last CLI value of each flag, and the ignored flags as given.
fn scan(args: &[String]) -> Result<(HashMap<Key, Raw>, Vec<String>), PolicyError> {
    let mut cli = HashMap::new();
    let mut ignored = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        let (flag, attached) = if let Some(long) = arg.strip_prefix("--") {
            if long.is_empty() {
                // `--`: everything after it is positional, and we take none.
                return match args.get(i) {
                    Some(extra) => Err(PolicyError::UnexpectedArgument(extra.clone())),
                    None => Ok((cli, ignored)),
                };
            }
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let flag = FLAGS
                .iter()
                .find(|f| f.long == name)
                .ok_or_else(|| unknown_long(name))?;
            (flag, value)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let c = chars.next().unwrap_or('-');
            let rest = chars.as_str();
            let flag = FLAGS
                .iter()
                .find(|f| f.short == Some(c))
                .ok_or_else(|| PolicyError::UnknownFlag(format!("-{c}")))?;
            let value = match rest.strip_prefix('=') {
                Some(v) => Some(v),
                None if rest.is_empty() => None,
                None if flag.takes_value => Some(rest),
                None => {
                    return Err(PolicyError::UnknownFlag(format!(
                        "{arg} (combined short flags are not supported)"
                    )))
                }
            };
            (flag, value)
        } else if i == 1 && arg == "istio-iptables" {
            continue;
        } else {
            return Err(PolicyError::UnexpectedArgument(arg.clone()));
        };
        let mut given = arg.clone();
        let value = match (attached, flag.takes_value) {
            (Some(v), _) => v.to_string(),
            (None, false) => "true".to_string(),
            (None, true) => {
                let v = args
                    .get(i)
                    .ok_or_else(|| PolicyError::MissingValue(flag.label()))?;
                i += 1;
                given = format!("{arg} {v}");
                v.clone()
            }
        };
        if flag.key == Key::Ignored {
            fixed_default(flag, &value)?;
            ignored.push(given);
        } else {
            let origin = flag.label();
            cli.insert(flag.key, Raw { value, origin });
        }
    }
    Ok((cli, ignored))
}
