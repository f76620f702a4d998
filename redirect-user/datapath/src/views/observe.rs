//! Per-namespace decision counters (`redirect stats`) and the live decision stream
//! (`redirect trace`), read from the pinned maps.
use redirect_common::NetnsCookie;
use std::{collections::BTreeMap, os::fd::AsFd as _, path::Path};

use aya::maps::{Array, Map, MapData, PerCpuHashMap, RingBuf};
use redirect_common::{map_names, Counter, NsCounterKey, TraceEvent};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::Serialize;

use crate::{
    error::{Error, Result},
    maps::store::{map_error, MapStore},
};

/// Counters of one namespace, non-zero only, in slot order.
pub(crate) type NsCounters = Vec<(&'static str, u64)>;

/// Sums every namespace's per-CPU counters.
pub fn ns_counters(store: &mut dyn MapStore) -> Result<BTreeMap<NetnsCookie, NsCounters>> {
    let map: PerCpuHashMap<&mut MapData, NsCounterKey, u64> =
        PerCpuHashMap::try_from(store.map(map_names::NETNS_COUNTERS)?)
            .map_err(map_error("opening", map_names::NETNS_COUNTERS))?;
    let mut out: BTreeMap<NetnsCookie, BTreeMap<u32, u64>> = BTreeMap::new();
    for entry in map.iter().filter_map(|e| e.ok()) {
        let (key, values) = entry;
        let sum: u64 = values.iter().sum();
        *out.entry(key.netns)
            .or_default()
            .entry(key.slot)
            .or_default() += sum;
    }
    Ok(out
        .into_iter()
        .map(|(ns, slots)| {
            let list = Counter::ALL
                .iter()
                .filter_map(|c| slots.get(&(*c as u32)).map(|n| (c.name(), *n)))
                .filter(|(_, n)| *n > 0)
                .collect();
            (ns, list)
        })
        .collect())
}

/// One decision, decoded: the keys `explain --json` uses for the same meanings (`direction`,
/// `protocol`, `src`, `dst`, `outcome`, `counter`, `rule`).
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// Outbound decisions name their caller, inbound ones their peer, never both.
#[cfg_attr(
    feature = "schema",
    schemars(extend("oneOf" = [
        {
            "properties": { "direction": { "const": "outbound" } },
            "required": ["caller"],
            "not": { "required": ["src"] }
        },
        {
            "properties": { "direction": { "const": "inbound" } },
            "required": ["src"],
            "not": { "required": ["caller"] }
        }
    ]))
)]
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    /// `outbound` (a connect or send from the namespace) or `inbound` (a connection arriving,
    /// decided by sk_lookup).
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::direction")
    )]
    pub(crate) direction: &'static str,
    /// Netns cookie (the CLI prints it as `cookie`, beside the namespace's path).
    #[serde(skip)]
    pub netns: NetnsCookie,
    /// Who connected (outbound only: an arriving SYN has no caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Caller"))]
    pub caller: Option<Caller>,
    /// `tcp` or `udp`.
    #[cfg_attr(
        feature = "schema",
        schemars(schema_with = "crate::views::schema::protocol")
    )]
    pub protocol: &'static str,
    /// The peer (inbound only).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(pattern(crate::views::schema::SOCKET_ADDR))
    )]
    #[cfg_attr(feature = "schema", schemars(with = "std::net::SocketAddr"))]
    pub src: Option<std::net::SocketAddr>,
    /// Original destination.
    #[cfg_attr(
        feature = "schema",
        schemars(pattern(crate::views::schema::SOCKET_ADDR))
    )]
    pub dst: std::net::SocketAddr,
    /// `proxy:15001`, `proxy:15006`, `dns:15053`, or `untouched`.
    #[cfg_attr(feature = "schema", schemars(pattern(crate::views::schema::OUTCOME)))]
    pub outcome: String,
    /// The deciding counter.
    #[cfg_attr(feature = "schema", schemars(pattern(crate::views::schema::COUNTER)))]
    pub counter: &'static str,
    /// The istio-iptables rule that decided.
    pub rule: &'static str,
}

/// The process behind an outbound decision.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct Caller {
    /// Its pid (thread group).
    pub pid: u32,
    /// Its command.
    pub comm: String,
    /// Its uid.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
}

/// Bytes of the event before the fields inbound tracing added (`src`, `sport`, `direction`):
/// what the programs of an older build, still pinned, write (all outbound).
const TRACE_EVENT_V1: usize = 64;

fn decode(bytes: &[u8]) -> Option<Decision> {
    if bytes.len() < TRACE_EVENT_V1 {
        return None;
    }
    // An older build's shorter record reads with the added fields zero (outbound).
    let mut full = [0u8; std::mem::size_of::<TraceEvent>()];
    let n = bytes.len().min(full.len());
    full[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: `full` holds one TraceEvent's bytes (repr(C), integers only, every bit pattern
    // valid) as written by the kernel side; read_unaligned copes with any alignment.
    let e: TraceEvent = unsafe { std::ptr::read_unaligned(full.as_ptr().cast()) };
    let ip = crate::maps::outbound::ip_of(e.family, e.dst);
    let counter = *Counter::ALL.get(usize::from(e.counter))?;
    let end = e.comm.iter().position(|b| *b == 0).unwrap_or(e.comm.len());
    let inbound = e.direction == redirect_common::TRACE_INBOUND;
    Some(Decision {
        direction: if inbound { "inbound" } else { "outbound" },
        netns: e.netns,
        caller: (!inbound).then(|| Caller {
            pid: e.pid,
            comm: String::from_utf8_lossy(&e.comm[..end]).into_owned(),
            uid: e.uid,
            gid: e.gid,
        }),
        protocol: if e.proto == 6 { "tcp" } else { "udp" },
        src: inbound.then(|| {
            std::net::SocketAddr::new(crate::maps::outbound::ip_of(e.family, e.src), e.sport)
        }),
        dst: std::net::SocketAddr::new(ip, e.dport),
        outcome: match (e.redirect_port, counter) {
            (0, _) => "untouched".to_owned(),
            (p, Counter::DnsRedirected) => format!("dns:{p}"),
            (p, _) => format!("proxy:{p}"),
        },
        counter: counter.name(),
        rule: counter.rule(),
    })
}

/// A running trace: turns the stream on while it lives.
pub struct Tracer {
    ring: RingBuf<MapData>,
    switch: Array<MapData, u32>,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").finish_non_exhaustive()
    }
}

impl Tracer {
    /// Takes the pinned `TRACE` and `TRACE_ON` maps and switches the stream on, recording this
    /// process's pid as the switch value (the programs only test it for non-zero). The ring has
    /// one reader: while another live `redirect trace` holds it, this one is refused with its pid.
    pub fn start(ring: Map, switch: Map) -> Result<Self> {
        let ring = RingBuf::try_from(ring).map_err(map_error("opening", map_names::TRACE))?;
        let mut switch: Array<MapData, u32> =
            Array::try_from(switch).map_err(map_error("opening", map_names::TRACE_ON))?;
        let me = std::process::id();
        let holder = switch
            .get(&0, 0)
            .map_err(map_error("reading", map_names::TRACE_ON))?;
        if holder != 0 && holder != me && Path::new(&format!("/proc/{holder}")).exists() {
            return Err(Error::TraceBusy { pid: holder });
        }
        switch
            .set(0, me, 0)
            .map_err(map_error("switching on", map_names::TRACE_ON))?;
        Ok(Self { ring, switch })
    }

    /// Waits up to `timeout_ms` for decisions and returns those that arrived.
    pub fn next_batch(&mut self, timeout_ms: u16) -> Result<Vec<Decision>> {
        let fd = self.ring.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let timeout = Timespec {
            tv_sec: i64::from(timeout_ms / 1000),
            tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
        };
        poll(&mut fds, Some(&timeout))
            .map_err(|e| Error::io("polling", map_names::TRACE, e.into()))?;
        let mut out = Vec::new();
        while let Some(item) = self.ring.next() {
            if let Some(d) = decode(&item) {
                out.push(d);
            }
        }
        Ok(out)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if self.switch.get(&0, 0).ok() == Some(std::process::id()) {
            let _ = self.switch.set(0, 0, 0);
        }
    }
}
