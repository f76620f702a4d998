//! Raw flag/env strings to typed [`Policy`] fields, with istio's defaults and our stricter checks.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net};

use super::args::{Key, Raw, Values};
use super::env::nameservers;
use super::validate::{interface_problem, loopback_problem};
use super::{
    Cidrs, EnvSource, Group, InboundPorts, Invocation, Mode, NoProxy, OwnerGroups, Policy,
    PolicyError, SystemLookup, DEFAULT_IPV4_LOOPBACK_CIDR, MAX_OWNER_IDS,
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

    let proxy_uids = match v.get(Key::ProxyUid).filter(|r| !r.value.is_empty()) {
        Some(raw) => ids(raw, "uid")?,
        None => {
            let user = env
                .get("ENVOY_USER")
                .unwrap_or_else(|| "istio-proxy".into());
            vec![sys.user_uid(&user).unwrap_or(1337)]
        }
    };
    let proxy_gids = match v.get(Key::ProxyGid).filter(|r| !r.value.is_empty()) {
        Some(raw) => ids(raw, "gid")?,
        None => proxy_uids.clone(),
    };
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
            return Err(bad(raw, "*", "is not allowed: istio-iptables refuses it (invalid value for OUTBOUND_IP_RANGES_EXCLUDE)"));
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
        Some(raw) => dns_list(raw)?,
        None if redirect_dns && !capture_all_dns => {
            let servers = nameservers(&sys.resolv_conf().map_err(PolicyError::ResolvConf)?);
            if servers.is_empty() {
                tracing::warn!("--redirect-dns is set but resolv.conf names no DNS server: DNS capture is off (as istio-iptables does)");
            }
            servers
        }
        None => Vec::new(),
    };
    let policy = Policy {
        proxy_port: port_or(Key::EnvoyPort, d.proxy_port)?,
        inbound_capture_port: port_or(Key::CapturePort, d.inbound_capture_port)?,
        tunnel_port: port_or(Key::TunnelPort, d.tunnel_port)?,
        proxy_uids,
        proxy_gids,
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
        dns_servers,
        owner_groups: owner_groups(env, sys)?,
        ipv4_loopback_cidr: loopback_cidr(env)?,
        dual_stack: bool_of(Key::DualStack)?,
        drop_invalid: bool_of(Key::DropInvalid)?,
        proxy_cgroup: path_of(Key::ProxyCgroup),
        no_proxy,
    };
    Ok(Invocation {
        policy,
        cleanup_only: bool_of(Key::CleanupOnly)?,
        dry_run: bool_of(Key::DryRun)? || bool_of(Key::SkipRuleApply)?,
        netns: string_of(Key::Netns)
            .or_else(|| string_of(Key::NetworkNamespace).filter(|s| !s.is_empty())),
        cgroup: path_of(Key::Cgroup),
        bpffs: path_of(Key::Bpffs),
        cluster_env: path_of(Key::ClusterEnv),
        run_validation: bool_of(Key::RunValidation)?,
        ignored,
    })
}

fn bad(raw: &Raw, value: &str, reason: &str) -> PolicyError {
    PolicyError::invalid(&raw.origin, value, reason)
}

/// istio's list split: on `,`, empty items dropped, no trimming.
fn items(s: &str) -> impl Iterator<Item = &str> {
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

fn cidrs(raw: &Raw) -> Result<Vec<IpNet>> {
    items(&raw.value)
        .map(|i| i.parse::<IpNet>().map_err(|_| bad(raw, i, "is not a CIDR")))
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

/// `-u`/`-g`: 1 to [`MAX_OWNER_IDS`] decimal ids.
fn ids(raw: &Raw, what: &str) -> Result<Vec<u32>> {
    let list = items(&raw.value)
        .map(|i| {
            i.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| i.parse::<u32>().ok())
                .flatten()
                .ok_or_else(|| bad(raw, i, &format!("is not a {what} (a decimal number)")))
        })
        .collect::<Result<Vec<_>>>()?;
    if list.is_empty() {
        return Err(bad(raw, &raw.value, &format!("names no {what}")));
    }
    too_many(&raw.origin, &raw.value, list.len(), &format!("{what}s"))?;
    Ok(list)
}

fn too_many(flag: &str, value: &str, n: usize, what: &str) -> Result<()> {
    if n > MAX_OWNER_IDS {
        return Err(PolicyError::invalid(
            flag,
            value,
            format!("lists {n} {what}; at most {MAX_OWNER_IDS} are supported (the eBPF datapath's fixed per-policy limit)"),
        ));
    }
    Ok(())
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

const GROUPS: &str = "ISTIO_OUTBOUND_OWNER_GROUPS";
const GROUPS_EXCLUDE: &str = "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE";

/// Include `*` (default) uses the exclude list; any other include value wins and the exclude
/// list is ignored (an empty include captures nothing), as istio-iptables does.
fn owner_groups(env: &dyn EnvSource, sys: &dyn SystemLookup) -> Result<OwnerGroups> {
    let include = env.get(GROUPS).unwrap_or_else(|| "*".into());
    if include != "*" {
        return Ok(OwnerGroups::Include(groups(GROUPS, &include, sys)?));
    }
    let exclude = env.get(GROUPS_EXCLUDE).unwrap_or_default();
    let list = groups(GROUPS_EXCLUDE, &exclude, sys)?;
    Ok(if list.is_empty() {
        OwnerGroups::All
    } else {
        OwnerGroups::Exclude(list)
    })
}

fn groups(var: &str, value: &str, sys: &dyn SystemLookup) -> Result<Vec<Group>> {
    let flag = format!("${var}");
    let list = items(value)
        .map(|name| {
            let numeric = name.bytes().all(|b| b.is_ascii_digit());
            let gid = if numeric {
                name.parse().ok()
            } else {
                sys.group_gid(name)
            };
            let reason = if numeric {
                "is not a gid (a number below 4294967296)"
            } else {
                "is not a known group (not in /etc/group)"
            };
            gid.map(|gid| Group {
                name: name.to_string(),
                gid,
            })
            .ok_or_else(|| PolicyError::invalid(&flag, name, reason))
        })
        .collect::<Result<Vec<_>>>()?;
    too_many(&flag, value, list.len(), "groups")?;
    Ok(list)
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
