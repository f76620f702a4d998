//! What the read-only commands print with `--json`, one type each (`probe`, `explain`, `trace`,
//! `stats`, `list`): the values they print are these types serialised, and the schemas in
//! `docs/schema` are generated from them (the tests' `schemas` module).
use redirect_common::NetnsCookie;
use redirect_daemon_api::{Enrollment, PodRef};
use redirect_datapath::{Decision, Explained, Probed};
use redirect_policy::Policy;
use serde::Serialize;

use crate::captured::Row;

/// `redirect probe --json`: the kernel, whether every required feature is there, and each
/// feature.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ProbeReport<'a> {
    /// The kernel release.
    pub kernel: String,
    /// Every required feature is there.
    pub ok: bool,
    /// Each feature probed.
    pub features: &'a [Probed],
}

/// `redirect explain --json`: what would happen to one connection, with trace's keys for the
/// same meanings.
#[derive(Debug, Serialize)]
#[serde(untagged)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) enum Explanation<'a> {
    /// A connect or send from the namespace.
    Outbound(ExplainOutbound<'a>),
    /// A connection arriving at the namespace.
    Inbound(ExplainInbound<'a>),
}

/// `explain` of an outbound connection: the caller asked about, under `caller`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ExplainOutbound<'a> {
    /// `outbound`.
    #[cfg_attr(test, schemars(extend("const" = "outbound")))]
    pub direction: &'static str,
    /// The namespace's path.
    pub netns: String,
    /// Its netns cookie.
    #[cfg_attr(test, schemars(with = "u64"))]
    pub cookie: NetnsCookie,
    /// The caller asked about.
    pub caller: ExplainCaller,
    /// `tcp` or `udp`.
    #[cfg_attr(test, schemars(schema_with = "redirect_datapath::schema::protocol"))]
    pub protocol: &'static str,
    /// The address the socket is bound to.
    pub bound: Option<String>,
    /// The destination.
    #[cfg_attr(test, schemars(pattern(redirect_datapath::schema::SOCKET_ADDR)))]
    pub dst: String,
    /// The datapath's answer.
    #[serde(flatten)]
    pub explained: Answer<'a>,
    /// The namespace has a policy of its own (else the default of `attach`, or none).
    pub own_policy: bool,
    /// The namespace is captured in TPROXY mode (`-m TPROXY`); false when it has no policy.
    pub tproxy: bool,
}

/// The caller `explain` asks about.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ExplainCaller {
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Its cgroup (`--cgroup`).
    pub cgroup: Option<String>,
    /// The socket's mark asked about (`--mark`; 0: none).
    pub mark: u32,
}

/// `explain --inbound`: a connection arriving from `src`.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct ExplainInbound<'a> {
    /// `inbound`.
    #[cfg_attr(test, schemars(extend("const" = "inbound")))]
    pub direction: &'static str,
    /// The namespace's path.
    pub netns: String,
    /// Its netns cookie.
    #[cfg_attr(test, schemars(with = "u64"))]
    pub cookie: NetnsCookie,
    /// `tcp`.
    #[cfg_attr(test, schemars(extend("const" = "tcp")))]
    pub protocol: &'static str,
    /// The peer.
    #[cfg_attr(test, schemars(pattern(redirect_datapath::schema::SOCKET_ADDR)))]
    pub src: String,
    /// The destination.
    #[cfg_attr(test, schemars(pattern(redirect_datapath::schema::SOCKET_ADDR)))]
    pub dst: String,
    /// The interface it arrives on (`--iface`).
    pub iface: Option<&'a str>,
    /// The datapath's answer.
    #[serde(flatten)]
    pub explained: Answer<'a>,
    /// The namespace is captured in TPROXY mode (`-m TPROXY`); false when it has no policy.
    pub tproxy: bool,
}

/// The decision `explain` gives, with trace's keys.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Answer<'a> {
    /// Where the connection goes.
    #[cfg_attr(test, schemars(pattern(redirect_datapath::schema::OUTCOME)))]
    pub outcome: &'a str,
    /// What qualifies the outcome, when something does.
    pub detail: Option<&'a str>,
    /// The deciding counter.
    #[cfg_attr(test, schemars(pattern(redirect_datapath::schema::COUNTER)))]
    pub counter: &'static str,
    /// The istio-iptables rule that decided.
    pub rule: &'static str,
}

impl<'a> From<&'a Explained> for Answer<'a> {
    fn from(e: &'a Explained) -> Self {
        Answer {
            outcome: &e.outcome,
            detail: e.detail.as_deref(),
            counter: e.counter,
            rule: e.rule,
        }
    }
}

/// `redirect trace --json`: one object per line, one decision each (outbound: its caller;
/// inbound: its peer).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct TraceLine<'a> {
    /// The namespace's path; null when nothing names it (the cookie beside it still does).
    pub netns: Option<String>,
    /// Its netns cookie.
    pub cookie: u64,
    /// The decision.
    #[serde(flatten)]
    pub decision: &'a Decision,
    /// The namespace is captured in TPROXY mode (`-m TPROXY`), read when the decision is
    /// shown; absent once it has no policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "bool"))]
    pub tproxy: Option<bool>,
}

/// `redirect stats --json`: one namespace with a policy or a count, every counter present
/// (zeros included).
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct NsStats {
    /// The namespace's path; null when nothing names it (the cookie beside it still does).
    pub netns: Option<String>,
    /// Its netns cookie.
    #[cfg_attr(test, schemars(with = "u64"))]
    pub cookie: NetnsCookie,
    /// Every decision counter, in their order, zeros included.
    #[serde(serialize_with = "counters_as_object")]
    #[cfg_attr(test, schemars(schema_with = "redirect_datapath::schema::counters"))]
    pub counters: Vec<(&'static str, u64)>,
}

fn counters_as_object<S: serde::Serializer>(
    counters: &[(&'static str, u64)],
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap as _;
    let mut map = s.serialize_map(Some(counters.len()))?;
    for (name, n) in counters {
        map.serialize_entry(name, n)?;
    }
    map.end()
}

/// `redirect list --json`: one captured thing, its row's keys then its record's own.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct Listed<'a> {
    /// The row.
    #[serde(flatten)]
    pub row: &'a Row,
    /// What the record adds (a namespace with a record).
    #[serde(flatten)]
    pub record: Option<RecordExtra<'a>>,
}

/// The keys of a record a row does not have.
#[derive(Debug, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub(crate) struct RecordExtra<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// Whether its IPv6 traffic follows the policy.
    pub ipv6: bool,
    /// The Kubernetes pod this namespace belongs to, when the CNI plugin enrolled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "PodRef"))]
    pub pod: Option<&'a PodRef>,
    /// Established connections its policy would capture that bypass the proxy, as last counted.
    pub outside_capture: usize,
}

impl<'a> Listed<'a> {
    pub(crate) fn of(row: &'a Row) -> Self {
        Listed {
            row,
            record: row.record.as_ref().map(|e: &'a Enrollment| RecordExtra {
                policy: &e.record.policy,
                ipv6: e.record.ipv6,
                pod: e.record.pod.as_ref(),
                outside_capture: e.outside_capture,
            }),
        }
    }
}
