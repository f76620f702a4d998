//! The annotations and istio-proxy fields istio-cni reads, each turned into the istio-iptables argument it becomes.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod::{annotation, env, go_bool};
use crate::{dns, Error};

/// `sidecar.istio.io/interceptionMode` (`-m`): REDIRECT or TPROXY.
pub const INTERCEPTION_MODE: &str = "sidecar.istio.io/interceptionMode";
/// `traffic.sidecar.istio.io/includeOutboundIPRanges` (`-i`, default `*`).
pub const INCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/includeOutboundIPRanges";
/// `traffic.sidecar.istio.io/excludeOutboundIPRanges` (`-x`).
pub const EXCLUDE_OUTBOUND_IP_RANGES: &str = "traffic.sidecar.istio.io/excludeOutboundIPRanges";
/// `traffic.sidecar.istio.io/includeInboundPorts` (`-b`, default `*`).
pub const INCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeInboundPorts";
/// `traffic.sidecar.istio.io/excludeInboundPorts` (`-d`, default 15020; 15020, 15021 and
/// 15090 are always added, and the proxy's status port).
pub const EXCLUDE_INBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeInboundPorts";
/// `traffic.sidecar.istio.io/includeOutboundPorts` (`-q`).
pub const INCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/includeOutboundPorts";
/// `traffic.sidecar.istio.io/excludeOutboundPorts` (`-o`, default 15020).
pub const EXCLUDE_OUTBOUND_PORTS: &str = "traffic.sidecar.istio.io/excludeOutboundPorts";
/// `traffic.sidecar.istio.io/excludeInterfaces` (`-c`).
pub const EXCLUDE_INTERFACES: &str = "traffic.sidecar.istio.io/excludeInterfaces";
/// `istio.io/reroute-virtual-interfaces` (`-k`); wins over [`KUBEVIRT_INTERFACES`].
pub const REROUTE_VIRTUAL_INTERFACES: &str = "istio.io/reroute-virtual-interfaces";
/// `traffic.sidecar.istio.io/kubevirtInterfaces` (`-k`, deprecated).
pub const KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
/// `status.sidecar.istio.io/port`: the agent's status port, excluded from inbound capture.
pub const STATUS_PORT: &str = "status.sidecar.istio.io/port";

/// The status port when nothing in the pod names another.
pub(crate) const DEFAULT_STATUS_PORT: &str = "15020";
/// Added to `-d` whatever the annotation says (istio-cni's own list).
const ALWAYS_EXCLUDED_INBOUND: [&str; 3] = ["15020", "15021", "15090"];
/// istio-cni's proxy uid/gid when the container sets none (or 0).
pub(crate) const DEFAULT_PROXY_ID: i64 = 1337;

/// One istio-iptables argument and where its value came from.
#[derive(Debug, Clone)]
pub(crate) struct Arg {
    /// `-i`, `--redirect-dns`.
    pub(crate) flag: &'static str,
    /// The value (`None` for a bool flag).
    pub(crate) value: Option<String>,
    /// `annotation traffic.sidecar.istio.io/includeOutboundIPRanges`, `default`, ...
    pub(crate) origin: String,
}

fn from_annotation(pod: &Pod, key: &'static str, default: &str) -> (String, String) {
    match annotation(pod, key) {
        Some(v) => (v.to_owned(), format!("annotation {key}")),
        None => (default.to_owned(), format!("default of {key}")),
    }
}

/// Every argument istio-cni would pass istio-iptables for `pod`, in the order of its config.
pub(crate) fn plan(pod: &Pod, cluster_dns: Option<IpAddr>) -> Result<Vec<Arg>, Error> {
    let proxy = crate::pod::proxy(pod);
    let mut out = Vec::new();
    let mut push = |flag, value: String, origin: String| {
        out.push(Arg {
            flag,
            value: Some(value),
            origin,
        })
    };
    push("-p", "15001".into(), "istio-cni's outbound port".into());
    push("-z", "15006".into(), "istio-cni's inbound port".into());
    let (uid, uid_from) = proxy_id(pod, proxy, IdField::User);
    push("-u", uid.to_string(), uid_from);
    let (gid, gid_from) = proxy_id(pod, proxy, IdField::Group);
    push("-g", gid.to_string(), gid_from);
    let (mode, mode_from) = mode(pod, proxy)?;
    push("-m", mode, mode_from);
    let (v, o) = from_annotation(pod, INCLUDE_OUTBOUND_IP_RANGES, "*");
    push("-i", v, o);
    let (v, o) = from_annotation(pod, EXCLUDE_OUTBOUND_IP_RANGES, "");
    if v == "*" {
        return Err(Error::invalid(
            &o,
            &v,
            &v,
            "is not a CIDR list (istio-cni refuses `*` here)",
        ));
    }
    push("-x", v, o);
    let (v, o) = from_annotation(pod, INCLUDE_INBOUND_PORTS, "*");
    push("-b", v, o);
    let (v, o) = from_annotation(pod, EXCLUDE_INBOUND_PORTS, DEFAULT_STATUS_PORT);
    let status = status_port(pod, proxy)?;
    push("-d", inbound_excludes(&v, &status), o);
    let (v, o) = from_annotation(pod, EXCLUDE_OUTBOUND_PORTS, DEFAULT_STATUS_PORT);
    push("-o", v, o);
    let (v, o) = from_annotation(pod, INCLUDE_OUTBOUND_PORTS, "");
    push("-q", v, o);
    let (v, o) = from_annotation(pod, EXCLUDE_INTERFACES, "");
    push("-c", v, o);
    let (v, o) = match annotation(pod, REROUTE_VIRTUAL_INTERFACES) {
        Some(_) => from_annotation(pod, REROUTE_VIRTUAL_INTERFACES, ""),
        None => from_annotation(pod, KUBEVIRT_INTERFACES, ""),
    };
    push("-k", v, o);
    let mut flag = |flag, origin: String| {
        out.push(Arg {
            flag,
            value: None,
            origin,
        })
    };
    if let Some(proxy) = proxy {
        if proxy_bool(proxy, "ISTIO_META_DNS_CAPTURE")? {
            let servers = dns::servers(pod, cluster_dns)?;
            flag(
                "--redirect-dns",
                "istio-proxy env ISTIO_META_DNS_CAPTURE".into(),
            );
            let list: Vec<String> = servers.iter().map(ToString::to_string).collect();
            out.push(Arg {
                flag: "--dns-servers",
                value: Some(list.join(",")),
                origin: "the pod's dnsPolicy and dnsConfig".into(),
            });
        }
    }
    let mut flag = |flag, origin: String| {
        out.push(Arg {
            flag,
            value: None,
            origin,
        })
    };
    let v6 = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ips.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|ip| ip.ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6()));
    let dual_env = match proxy {
        Some(p) => proxy_bool(p, "ISTIO_DUAL_STACK")?,
        None => false,
    };
    if dual_env {
        flag("--dual-stack", "istio-proxy env ISTIO_DUAL_STACK".into());
    } else if v6 {
        flag("--dual-stack", "an IPv6 address in status.podIPs".into());
    }
    if let Some(p) = proxy {
        if proxy_bool(p, "INVALID_DROP")? {
            flag("--drop-invalid", "istio-proxy env INVALID_DROP".into());
        }
    }
    Ok(out)
}

/// A bool env variable of istio-proxy (Go's ParseBool; istio-cni warns and reads false for
/// anything else, we refuse it).
fn proxy_bool(proxy: &Container, name: &str) -> Result<bool, Error> {
    match env(proxy, name) {
        None => Ok(false),
        Some(v) => go_bool(v).ok_or_else(|| {
            Error::invalid(
                &format!("istio-proxy env {name}"),
                v,
                v,
                "is not a bool (true or false)",
            )
        }),
    }
}

/// `-m`: the annotation, else what the injector told the proxy (`ISTIO_META_INTERCEPTION_MODE`,
/// the same value), else REDIRECT.
fn mode(pod: &Pod, proxy: Option<&Container>) -> Result<(String, String), Error> {
    let (value, origin) = match annotation(pod, INTERCEPTION_MODE) {
        Some(v) => (v, format!("annotation {INTERCEPTION_MODE}")),
        None => match proxy.and_then(|p| env(p, "ISTIO_META_INTERCEPTION_MODE")) {
            Some(v) => (v, "istio-proxy env ISTIO_META_INTERCEPTION_MODE".to_owned()),
            None => ("REDIRECT", format!("default of {INTERCEPTION_MODE}")),
        },
    };
    match value {
        "REDIRECT" | "TPROXY" => Ok((value.to_owned(), origin)),
        _ => Err(Error::invalid(
            &origin,
            value,
            value,
            "is not an interception mode (REDIRECT or TPROXY)",
        )),
    }
}

#[derive(Clone, Copy)]
enum IdField {
    User,
    Group,
}

/// `-u`/`-g`: istio-proxy's `runAsUser`/`runAsGroup`, else the pod's, else 1337 (0 counts as
/// unset, as istio-cni has it: a TPROXY proxy runs as root and is still bypassed as 1337).
fn proxy_id(pod: &Pod, proxy: Option<&Container>, field: IdField) -> (i64, String) {
    let name = match field {
        IdField::User => "runAsUser",
        IdField::Group => "runAsGroup",
    };
    let container = proxy
        .and_then(|c| c.security_context.as_ref())
        .and_then(|s| match field {
            IdField::User => s.run_as_user,
            IdField::Group => s.run_as_group,
        });
    let pod_level = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| match field {
            IdField::User => s.run_as_user,
            IdField::Group => s.run_as_group,
        });
    match (container, pod_level) {
        (Some(id), _) if id != 0 => (id, format!("istio-proxy securityContext.{name}")),
        (None, Some(id)) if id != 0 => (id, format!("pod securityContext.{name}")),
        _ => (
            DEFAULT_PROXY_ID,
            format!("istio-cni's default proxy {name}"),
        ),
    }
}

/// The agent's status port: the annotation, else istio-proxy's `--statusPort`, else 15020.
fn status_port(pod: &Pod, proxy: Option<&Container>) -> Result<String, Error> {
    let found = annotation(pod, STATUS_PORT)
        .map(|v| (v.to_owned(), format!("annotation {STATUS_PORT}")))
        .or_else(|| {
            let args = proxy?.args.as_deref()?;
            let i = args.iter().position(|a| a == "--statusPort")?;
            Some((
                args.get(i + 1)?.clone(),
                "istio-proxy args --statusPort".into(),
            ))
        })
        .or_else(|| {
            proxy?
                .args
                .as_deref()?
                .iter()
                .find_map(|a| a.strip_prefix("--statusPort="))
                .map(|v| (v.to_owned(), "istio-proxy args --statusPort".into()))
        });
    let Some((value, origin)) = found else {
        return Ok(DEFAULT_STATUS_PORT.into());
    };
    let ok = value.bytes().all(|b| b.is_ascii_digit()) && value.parse::<u16>().is_ok();
    if !ok {
        return Err(Error::invalid(
            &origin,
            &value,
            &value,
            "is not a port (a number 0-65535)",
        ));
    }
    Ok(value)
}

/// istio-cni's `-d`: the annotation (or 15020), then 15020, 15021, 15090 and the status port
/// (0: none), each once, in that order.
fn inbound_excludes(annotation: &str, status: &str) -> String {
    let mut ports: Vec<&str> = annotation
        .trim()
        .split(',')
        .filter(|p| !p.is_empty())
        .collect();
    let extra = ALWAYS_EXCLUDED_INBOUND
        .iter()
        .copied()
        .chain((status != "0").then_some(status));
    for p in extra {
        ports.push(p);
    }
    let mut seen = Vec::new();
    ports.retain(|p| {
        let new = !seen.contains(p);
        seen.push(*p);
        new
    });
    ports.join(",")
}
