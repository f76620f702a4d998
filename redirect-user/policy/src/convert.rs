//! Raw flag/env strings to typed [`Policy`] fields, with istio's defaults and our stricter checks.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net};

use super::args::{Key, Raw, Values};
use super::env::nameservers;
use super::ids::{default_uid, ids, owner_groups, IdKind};
use super::lookup::NotLookedUp;
use super::validate::{interface_problem, loopback_problem};
use super::{
    Cidrs, EnvSource, InboundPorts, Invocation, Mode, NoProxy, OwnerGroups, Policy, PolicyError,
    SystemLookup, DEFAULT_IPV4_LOOPBACK_CIDR, DEFAULT_PROBE_PORT, DEFAULT_PROBE_TIMEOUT,
    MAX_OWNER_IDS,
};

type Result<T> = std::result::Result<T, PolicyError>;

/// Assemble the invocation from the resolved raw values.
pub(super) fn invocation(
    v: &Values,
    ignored: Vec<String>,
    env: &dyn EnvSource,
    sys: &dyn SystemLookup,
) -> Result<Invocation> {
    let d = Policy::default();
    let port_or = |key, default| v.get(key).map_or(Ok(default), port);
    let bool_of = |key| v.get(key).map_or(Ok(false), boolean);
    let ports_of = |key| v.get(key).map_or(Ok(Vec::new()), ports);
    let ifaces_of = |key| v.get(key).map_or(Ok(Vec::new()), interfaces);
    let string_of = |key| v.get(key).map(|r: &Raw| r.value.clone());
    let path_of = |key| string_of(key).map(PathBuf::from);
    let cleanup_only = bool_of(Key::CleanupOnly)?;
    // --cleanup-only applies no policy: nothing of the pod is read for it.
    let sys: &dyn SystemLookup = if cleanup_only { &NotLookedUp } else { sys };

    let mode = match v.get(Key::Mode) {
        None => Mode::Redirect,
        Some(raw) => match raw.value.as_str() {
            "" | "REDIRECT" => Mode::Redirect,
            "TPROXY" => Mode::Tproxy,
            _ => {
                return Err(bad(
                    raw,
                    &raw.value,
                    "is not an interception mode (REDIRECT or TPROXY)",
                ))
            }
        },
    };
    let no_proxy = match v.get(Key::NoProxy) {
        None => NoProxy::Refuse,
        Some(raw) => match raw.value.as_str() {
            "refuse" => NoProxy::Refuse,
            "passthrough" => NoProxy::Passthrough,
            _ => return Err(bad(raw, &raw.value, "is not refuse or passthrough")),
        },
    };
    let include_cidrs = match v.get(Key::ServiceCidr) {
        Some(raw) if raw.value == "*" => Cidrs::All,
        Some(raw) => Cidrs::List(cidrs(raw)?),
        None => Cidrs::List(Vec::new()),
    };
    let exclude_cidrs = match v.get(Key::ExcludeCidr) {
        Some(raw) if raw.value == "*" => {
            return Err(bad(
                raw,
                "*",
                "is not allowed: istio-iptables refuses it (invalid value for \
                OUTBOUND_IP_RANGES_EXCLUDE)",
            ));
        }
        Some(raw) => cidrs(raw)?,
        None => Vec::new(),
    };
    let inbound_ports = match v.get(Key::InboundPorts) {
        Some(raw) if raw.value == "*" => InboundPorts::All,
        Some(raw) => InboundPorts::List(ports(raw)?),
        None => InboundPorts::List(Vec::new()),
    };
    let redirect_dns = bool_of(Key::RedirectDns)?;
    let capture_all_dns = bool_of(Key::CaptureAllDns)?;
    let dns_servers = match v.get(Key::DnsServers) {
        Some(raw) => Some(dns_list(raw)?),
        None if redirect_dns && !capture_all_dns && !cleanup_only => None,
        None => Some(Vec::new()),
    };
    let policy = Policy {
        proxy_port: port_or(Key::EnvoyPort, d.proxy_port)?,
        inbound_capture_port: port_or(Key::CapturePort, d.inbound_capture_port)?,
        tunnel_port: port_or(Key::TunnelPort, d.tunnel_port)?,
        // The pod's files are read last: every flag is checked first.
        proxy_uids: Vec::new(),
        proxy_gids: Vec::new(),
        mode,
        include_cidrs,
        exclude_cidrs,
        include_ports: ports_of(Key::OutboundPorts)?,
        exclude_ports: ports_of(Key::OutboundExclude)?,
        inbound_ports,
        inbound_exclude_ports: ports_of(Key::InboundExclude)?,
        exclude_interfaces: ifaces_of(Key::ExcludeIfaces)?,
        kube_virt_interfaces: ifaces_of(Key::KubeVirt)?,
        redirect_dns,
        capture_all_dns,
        dns_servers: Vec::new(),
        owner_groups: OwnerGroups::All,
        ipv4_loopback_cidr: loopback_cidr(env)?,
        dual_stack: bool_of(Key::DualStack)?,
        drop_invalid: bool_of(Key::DropInvalid)?,
        proxy_cgroup: path_of(Key::ProxyCgroup),
        proxy_bypass_closed: false,
        own_addresses: None,
        no_proxy,
    };
    let mut inv = Invocation {
        policy,
        cleanup_only,
        dry_run: bool_of(Key::DryRun)? || bool_of(Key::SkipRuleApply)?,
        netns: string_of(Key::Netns)
            .or_else(|| string_of(Key::NetworkNamespace).filter(|s| !s.is_empty())),
        cgroup: path_of(Key::Cgroup),
        bpffs: path_of(Key::Bpffs),
        cluster_env: path_of(Key::ClusterEnv),
        run_validation: bool_of(Key::RunValidation)?,
        probe_port: port_or(Key::ProbePort, DEFAULT_PROBE_PORT)?,
        probe_timeout: v
            .get(Key::ProbeTimeout)
            .map_or(Ok(DEFAULT_PROBE_TIMEOUT), probe_timeout)?,
        ignored,
        notes: Vec::new(),
    };
    let p = &mut inv.policy;
    p.proxy_uids = match v.get(Key::ProxyUid).filter(|r| !r.value.is_empty()) {
        Some(raw) => ids(raw, IdKind::Uid, sys)?,
        None => {
            let (uid, note) = default_uid(env, sys)?;
            inv.notes.extend(note);
            vec![uid]
        }
    };
    p.proxy_gids = match v.get(Key::ProxyGid).filter(|r| !r.value.is_empty()) {
        Some(raw) => ids(raw, IdKind::Gid, sys)?,
        None => p.proxy_uids.clone(),
    };
    p.owner_groups = owner_groups(env, sys)?;
    p.dns_servers = match dns_servers {
        Some(list) => list,
        None => pod_nameservers(v, sys)?,
    };
    Ok(inv)
}

/// `--redirect-dns` without `--dns-servers` or `--capture-all-dns`: the pod's resolv.conf.
fn pod_nameservers(v: &Values, sys: &dyn SystemLookup) -> Result<Vec<IpAddr>> {
    let origin = v
        .get(Key::RedirectDns)
        .map_or("--redirect-dns", |r| &r.origin);
    let view = sys.resolv_conf().map_err(|lookup| PolicyError::PodFile {
        needed: format!(
            "{origin} is on and --capture-all-dns is off, so DNS capture needs the pod's nameservers"
        ),
        lookup: Box::new(lookup),
        fix: "pass --dns-servers LIST (the pod's DNS servers, e.g. its cluster DNS) or --capture-all-dns".into(),
    })?;
    let servers = nameservers(&view.text);
    if servers.is_empty() {
        tracing::warn!(from = %view.from, "--redirect-dns is set but resolv.conf names no DNS \
            server: DNS capture is off (as istio-iptables does)");
    } else {
        tracing::info!(servers = %crate::shown::Comma(&servers), from = %view.from, "DNS servers of the pod");
    }
    Ok(servers)
}

pub(super) fn bad(raw: &Raw, value: &str, reason: &str) -> PolicyError {
    PolicyError::invalid(&raw.origin, value, reason)
}

/// istio's list split: on `,`, empty items dropped, no trimming.
pub(super) fn items(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|i| !i.is_empty())
}

/// A port: decimal digits only, 1..=65535.
fn port(raw: &Raw) -> Result<u16> {
    port_item(raw, &raw.value)
}

fn port_item(raw: &Raw, item: &str) -> Result<u16> {
    item.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| item.parse::<u16>().ok())
        .flatten()
        .filter(|p| *p != 0)
        .ok_or_else(|| bad(raw, item, "is not a port (a number 1-65535)"))
}

fn ports(raw: &Raw) -> Result<Vec<u16>> {
    items(&raw.value).map(|i| port_item(raw, i)).collect()
}

/// CIDRs as iptables takes them: host bits set (`10.0.0.1/8`) are cleared, as iptables clears
/// them, with a warning naming both (the rule matches the network, not the address given).
fn cidrs(raw: &Raw) -> Result<Vec<IpNet>> {
    items(&raw.value)
        .map(|i| {
            let net = i
                .parse::<IpNet>()
                .map_err(|_| bad(raw, i, "is not a CIDR"))?;
            let trunc = net.trunc();
            if trunc != net {
                tracing::warn!(flag = %raw.origin, given = %net, taken = %trunc,
                    "a CIDR with host bits set: taken as its network, as iptables normalises it");
            }
            Ok(trunc)
        })
        .collect()
}

fn dns_list(raw: &Raw) -> Result<Vec<IpAddr>> {
    items(&raw.value)
        .map(|i| {
            i.parse::<IpAddr>()
                .map_err(|_| bad(raw, i, "is not an IP address"))
        })
        .collect()
}

pub(super) fn too_many(flag: &str, value: &str, n: usize, what: &str) -> Result<()> {
    if n > MAX_OWNER_IDS {
        return Err(PolicyError::invalid(
            flag,
            value,
            format!(
                "lists {n} {what}; at most {MAX_OWNER_IDS} are supported (the eBPF datapath's \
                fixed per-policy limit)"
            ),
        ));
    }
    Ok(())
}

/// `--probe-timeout`: a Go duration as istio-iptables' flag takes it, not negative.
fn probe_timeout(raw: &Raw) -> Result<std::time::Duration> {
    super::args_duration::go_duration(&raw.value).ok_or_else(|| {
        bad(
            raw,
            &raw.value,
            "is not a duration (a number with a unit: 5s, 1500ms, 1m30s)",
        )
    })
}

fn boolean(raw: &Raw) -> Result<bool> {
    match raw.value.as_str() {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        v => Err(bad(raw, v, "is not a bool (true or false)")),
    }
}

/// Interface names as the kernel allows them (see [`interface_problem`]).
fn interfaces(raw: &Raw) -> Result<Vec<String>> {
    items(&raw.value)
        .map(|i| match interface_problem(i) {
            Some(reason) => Err(bad(raw, i, reason)),
            None => Ok(i.to_string()),
        })
        .collect()
}

const LOOPBACK: &str = "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR";

/// istio's rule: an IPv4 loopback CIDR with a mask of 8 to 32 bits.
fn loopback_cidr(env: &dyn EnvSource) -> Result<Ipv4Net> {
    let Some(value) = env.get(LOOPBACK) else {
        return Ok(DEFAULT_IPV4_LOOPBACK_CIDR);
    };
    let err = |reason: &str| PolicyError::invalid(&format!("${LOOPBACK}"), &value, reason);
    let net: Ipv4Net = value.parse().map_err(|_| err("is not an IPv4 CIDR"))?;
    match loopback_problem(&net) {
        Some(reason) => Err(err(reason)),
        None => Ok(net),
    }
}
