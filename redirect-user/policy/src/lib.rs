//! The istio-iptables capture policy: `istio-iptables` arguments, env and cluster.env parsed into one [`Policy`].
//!
//! [`parse_invocation`] reads what an istio-init container asks for (flags, with the env vars
//! and aliases istio-iptables binds them to), stricter than istio where istio would silently
//! misbehave. [`iptables_restore_text`] renders the iptables-restore input istio-iptables would
//! apply for a policy, which the conformance suite compares with Istio's goldens.
//!
//! Every module is the crate's own: other crates come in only through the doors below.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]

mod args;
mod args_duration;
mod convert;
mod describe;
mod env;
mod error;
mod ids;
mod inbound_spec;
mod json;
mod kernel;
mod lookup;
mod rules;
mod rules_chains;
mod shown;
mod suggest;
mod validate;

#[cfg(test)]
mod args_tests;
#[cfg(test)]
mod errors_tests;
#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod golden_tests;
#[cfg(test)]
mod lookup_tests;
#[cfg(test)]
mod test_support;

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::{IpNet, Ipv4Net};
use serde::{Deserialize, Serialize};

// What went wrong, the env read, and the ids and files looked up (for a pod, through its root).
pub use env::{parse_cluster_env, std_env, LayeredEnv};
pub use error::PolicyError;
pub use lookup::{Id, LookupError, OwnFiles, PodFile, PodSource, Sources, SystemLookup, View};

// A policy read: from istio-iptables' arguments, or from JSON.
pub use args::parse_invocation;
pub use json::{policy_from_json, policy_from_value};

// A policy shown: the iptables-restore text istio-iptables would apply, a policy's and a
// change's lines, lists in log fields, the closest known name.
pub use describe::{changes as describe_changes, policy_lines as describe_policy};
pub use rules::iptables_restore_text;
pub use shown::{Comma, Paths};
pub use suggest::closest;

// `redirect attach --inbound`'s spec.
pub use inbound_spec::{
    InboundPorts as InboundSpecPorts, InboundSpec, NoListener,
    DEFAULT_EXCLUDE as DEFAULT_INBOUND_EXCLUDE,
};

// A policy compiled for the datapath's maps.
pub use kernel::inbound::{
    inbound_kernel, policy_of as inbound_policy_of, port_entries as inbound_port_entries,
    spec_of as inbound_spec_of, InboundKernel,
};
pub use kernel::outbound::{compile as compile_outbound, CgroupRef, Compiled, PolicyLimit};

/// Most uids, gids or owner groups a policy may list (the eBPF datapath's fixed-size arrays).
pub const MAX_OWNER_IDS: usize = redirect_common::outbound::MAX_OWNERS;

/// istio-iptables' default `--iptables-probe-port`.
pub const DEFAULT_PROBE_PORT: u16 = 15002;

/// istio-iptables' default `--probe-timeout`.
pub const DEFAULT_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// istio's default `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR`.
pub const DEFAULT_IPV4_LOOPBACK_CIDR: Ipv4Net =
    Ipv4Net::new_assert(std::net::Ipv4Addr::new(127, 0, 0, 1), 32);

/// How inbound traffic is captured (`-m`). JSON: `"redirect"` or `"tproxy"` (the names of
/// before, `"Redirect"`, `"Tproxy"`, are read too).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// nat REDIRECT to the inbound capture port (istio's default).
    #[serde(alias = "Redirect")]
    Redirect,
    /// mangle TPROXY to the inbound capture port.
    #[serde(alias = "Tproxy")]
    Tproxy,
}

/// Outbound destinations captured (`-i`). JSON: `{"kind": "all"}` or `{"kind": "list",
/// "items": [...]}` (the form of before, `"All"` or `{"List": [...]}`, is read too).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "items",
    rename_all = "snake_case",
    from = "json::Either<json::CidrsTagged, json::CidrsBefore>"
)]
pub enum Cidrs {
    /// `*`: every destination.
    All,
    /// These CIDRs, as written (host bits kept; call `.trunc()` for the network). Empty: none.
    List(#[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))] Vec<IpNet>),
}

/// Inbound ports captured (`-b`). JSON as [`Cidrs`]: `{"kind": "all"}` or `{"kind": "list",
/// "items": [...]}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "items",
    rename_all = "snake_case",
    from = "json::Either<json::PortsTagged, json::PortsBefore>"
)]
pub enum InboundPorts {
    /// `*`: every port except `-d` and the tunnel port.
    All,
    /// These ports. Empty: inbound capture disabled.
    List(Vec<u16>),
}

/// A group of `ISTIO_OUTBOUND_OWNER_GROUPS[_EXCLUDE]`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    /// As written: a name (`java`) or a number (`202`). iptables rules use this.
    pub name: String,
    /// The resolved gid.
    pub gid: u32,
}

/// Which processes' outbound traffic is captured, by group (env only). JSON: `{"kind": "all"}`,
/// `{"kind": "include", "items": [...]}` or `{"kind": "exclude", "items": [...]}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    content = "items",
    rename_all = "snake_case",
    from = "json::Either<json::GroupsTagged, json::GroupsBefore>"
)]
pub enum OwnerGroups {
    /// No group filter (include `*`, empty exclude).
    All,
    /// Only processes in one of these groups; an empty list captures nothing.
    Include(Vec<Group>),
    /// Every process except those in these groups.
    Exclude(Vec<Group>),
}

/// Everything istio-iptables' flags and env decide about capture.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// `-p`: outbound capture port (virtualOutbound).
    pub proxy_port: u16,
    /// `-z`: inbound capture port (virtualInbound).
    pub inbound_capture_port: u16,
    /// `-e`: inbound tunnel port, never captured.
    pub tunnel_port: u16,
    /// `-u`: the proxy's uids (default: uid of `$ENVOY_USER`, else 1337).
    pub proxy_uids: Vec<u32>,
    /// `-g`: the proxy's gids (default: the resolved `-u`).
    pub proxy_gids: Vec<u32>,
    /// `-m`: inbound interception mode.
    pub mode: Mode,
    /// `-i`: outbound destinations captured.
    pub include_cidrs: Cidrs,
    /// `-x`: outbound destinations never captured (beat `-q` and `-i`).
    #[cfg_attr(feature = "schema", schemars(with = "Vec<String>"))]
    pub exclude_cidrs: Vec<IpNet>,
    /// `-q`: outbound TCP ports always captured (unless `-x`).
    pub include_ports: Vec<u16>,
    /// `-o`: outbound ports never captured (TCP and UDP).
    pub exclude_ports: Vec<u16>,
    /// `-b`: inbound ports captured.
    pub inbound_ports: InboundPorts,
    /// `-d`: inbound ports not captured (only with `-b '*'`).
    pub inbound_exclude_ports: Vec<u16>,
    /// `-c`: interfaces excluded in both directions.
    pub exclude_interfaces: Vec<String>,
    /// `-k`: kube virt interfaces (inbound from them is treated as outbound).
    pub kube_virt_interfaces: Vec<String>,
    /// `--redirect-dns` / `ISTIO_META_DNS_CAPTURE`.
    pub redirect_dns: bool,
    /// `--capture-all-dns`.
    pub capture_all_dns: bool,
    /// DNS servers whose port-53 traffic is captured (`--dns-servers`, else resolv.conf).
    pub dns_servers: Vec<IpAddr>,
    /// `ISTIO_OUTBOUND_OWNER_GROUPS` / `ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE`.
    pub owner_groups: OwnerGroups,
    /// `ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR` (default 127.0.0.1/32), as written.
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub ipv4_loopback_cidr: Ipv4Net,
    /// `--dual-stack` / `ISTIO_DUAL_STACK`.
    pub dual_stack: bool,
    /// `--drop-invalid` / `INVALID_DROP`.
    pub drop_invalid: bool,
    /// Ours (`--bind-proxy-cgroup`): the proxy's cgroup; the uid/gid bypass then only applies to
    /// processes inside it, so an application that happens to run as uid 1337 is captured.
    #[serde(default)]
    pub proxy_cgroup: Option<std::path::PathBuf>,
    /// Ours (the daemon's, for pods): the uid/gid bypass is held by no cgroup while
    /// `proxy_cgroup` is unset, so the proxy uid/gid is captured anywhere in the namespace,
    /// like an application (fail closed: the pod's proxy container exited, or a strict
    /// enrollment's proxy does not run yet). Ignored when `proxy_cgroup` is set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub proxy_bypass_closed: bool,
    /// Ours (the daemon's, for pods): the only addresses, besides link-local ones, that the
    /// namespace may claim for inbound capture (its pod's `status.podIPs`, or the runtime's
    /// prevResult); others it puts on its interfaces are never its own (a pod with NET_ADMIN
    /// could otherwise claim the address the next pod will be given). `None`: every address
    /// it holds (a namespace enrolled by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Vec<IpAddr>"))]
    pub own_addresses: Option<Vec<IpAddr>>,
    /// Ours (`--no-proxy`): what outbound connects do while the proxy does not listen yet.
    #[serde(default)]
    pub no_proxy: NoProxy,
}

/// Outbound capture while nothing listens on the proxy's port (the app started first). JSON:
/// `"refuse"` or `"passthrough"`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoProxy {
    /// Send them to the closed port anyway: the connect fails fast, as with iptables.
    #[default]
    #[serde(alias = "Refuse")]
    Refuse,
    /// Leave them alone until the proxy listens.
    #[serde(alias = "Passthrough")]
    Passthrough,
}

impl Policy {
    /// Whether DNS capture is in effect: istio turns it off when no server is known.
    pub fn dns_enabled(&self) -> bool {
        self.redirect_dns && (self.capture_all_dns || !self.dns_servers.is_empty())
    }

    /// istio's `HasLoopBackIP` over both families: an `-i` CIDR whose *address* is loopback
    /// (127/8 or ::1; `0.0.0.0/0` does not count). It drops the `-o lo ! --uid-owner` returns.
    pub(crate) fn include_has_loopback(&self) -> bool {
        match &self.include_cidrs {
            Cidrs::All => false,
            Cidrs::List(nets) => nets.iter().any(|n| n.addr().is_loopback()),
        }
    }
}

impl Default for Policy {
    /// istio-iptables with no flags and no env, with the proxy uid/gid resolved to 1337.
    fn default() -> Self {
        Policy {
            proxy_port: 15001,
            inbound_capture_port: 15006,
            tunnel_port: 15008,
            proxy_uids: vec![1337],
            proxy_gids: vec![1337],
            mode: Mode::Redirect,
            include_cidrs: Cidrs::List(Vec::new()),
            exclude_cidrs: Vec::new(),
            include_ports: Vec::new(),
            exclude_ports: Vec::new(),
            inbound_ports: InboundPorts::List(Vec::new()),
            inbound_exclude_ports: Vec::new(),
            exclude_interfaces: Vec::new(),
            kube_virt_interfaces: Vec::new(),
            redirect_dns: false,
            capture_all_dns: false,
            dns_servers: Vec::new(),
            owner_groups: OwnerGroups::All,
            ipv4_loopback_cidr: DEFAULT_IPV4_LOOPBACK_CIDR,
            dual_stack: false,
            drop_invalid: false,
            proxy_cgroup: None,
            proxy_bypass_closed: false,
            own_addresses: None,
            no_proxy: NoProxy::Refuse,
        }
    }
}

/// What one `redirect istio-iptables ...` invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The capture policy.
    pub policy: Policy,
    /// `--cleanup-only`: remove, add nothing.
    pub cleanup_only: bool,
    /// `-n` / `--dry-run` (also `--skip-rule-apply`): change nothing.
    pub dry_run: bool,
    /// Ours: `--netns NAME|PATH` (istio's `--network-namespace` is taken as the same).
    pub netns: Option<String>,
    /// Ours: `--cgroup PATH`.
    pub cgroup: Option<PathBuf>,
    /// Ours: `--bpffs DIR`.
    pub bpffs: Option<PathBuf>,
    /// Ours: `--cluster-env FILE` (read by the caller and layered under the env).
    pub cluster_env: Option<PathBuf>,
    /// `--run-validation`: check that capture works as istio-validation does (listen on the
    /// proxy's ports, dial the probe port), applying nothing.
    pub run_validation: bool,
    /// `--iptables-probe-port` / `IPTABLES_PROBE_PORT`: the port the validation dials
    /// (Istio's default 15002).
    pub probe_port: u16,
    /// `--probe-timeout` / `PROBE_TIMEOUT` (a Go duration: `5s`, `1500ms`): how long the
    /// validation tries before it fails (Istio's default 5 s).
    pub probe_timeout: std::time::Duration,
    /// Accepted but ignored flags, one entry per flag as given (`-t 1337`, `--log_as_json`).
    pub ignored: Vec<String>,
    /// Where values no flag gave came from, for the command's output (`proxy uid 1337:
    /// istio-iptables' default, ...`).
    pub notes: Vec<String>,
}

/// Source of environment values, so tests need no real env.
pub trait EnvSource {
    /// The value of `name`, `Some("")` when set to empty, `None` when unset.
    fn get(&self, name: &str) -> Option<String>;
}

impl EnvSource for std::collections::HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        std::collections::HashMap::get(self, name).cloned()
    }
}

impl<T: EnvSource + ?Sized> EnvSource for &T {
    fn get(&self, name: &str) -> Option<String> {
        (**self).get(name)
    }
}
