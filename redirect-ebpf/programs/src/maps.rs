//! Maps shared by the hooks, and the per-CPU decision counters.
use aya_ebpf::{
    bindings::{bpf_sock, BPF_SK_STORAGE_GET_F_CREATE},
    btf_maps::SkStorage,
    helpers::generated::bpf_sk_storage_get,
    macros::{btf_map, map},
    maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf, SockHash},
    programs::SockOpsContext,
};
use redirect_common::sock::SockState;
use redirect_common::{
    outbound::{CidrKey, OutboundPolicy},
    AddrKey, ConnKey, Counter, IfKey, InboundPolicy, ListenerKey, NetnsCookie, NsCounterKey,
    PortKey, Tracked, CIDR_MAX_ENTRIES, INBOUND_MAX_ENTRIES, MAX_NAMESPACES, TRACKED_MAX_ENTRIES,
};

/// Netns cookie -> outbound policy of that namespace (0: the default for the others).
#[map(name = "NETNS_OUTBOUND")]
pub(crate) static NETNS_OUTBOUND: HashMap<u64, OutboundPolicy> =
    HashMap::with_max_entries(MAX_NAMESPACES + 1, BPF_F_NO_PREALLOC);

/// (netns, CIDR) -> 1: outbound destinations never captured (`-x`).
#[map(name = "OUT_EXCLUDE")]
pub(crate) static OUT_EXCLUDE: LpmTrie<CidrKey, u8> =
    LpmTrie::with_max_entries(CIDR_MAX_ENTRIES, 0);

/// (netns, CIDR) -> 1: outbound destinations captured (`-i` list).
#[map(name = "OUT_INCLUDE")]
pub(crate) static OUT_INCLUDE: LpmTrie<CidrKey, u8> =
    LpmTrie::with_max_entries(CIDR_MAX_ENTRIES, 0);

/// (netns, route prefix) -> 1 when the route leaves through an excluded interface (`-c`), 0
/// otherwise: the namespace's main routing table, so the longest match is the route taken.
#[map(name = "OUT_ROUTES")]
pub(crate) static OUT_ROUTES: LpmTrie<CidrKey, u8> = LpmTrie::with_max_entries(CIDR_MAX_ENTRIES, 0);

/// (netns, ifindex) -> `IFACE_*` bits: arriving traffic is not inbound-captured.
#[map(name = "IFACES")]
pub(crate) static IFACES: HashMap<IfKey, u8> =
    HashMap::with_max_entries(MAX_NAMESPACES * 4, BPF_F_NO_PREALLOC);

/// (netns, port) -> `OUT_PORT_EXCLUDE` (`-o`) | `OUT_PORT_INCLUDE` (`-q`); full-length keys (a
/// trie holds only the rules written, see [`PortKey`]).
#[map(name = "OUT_PORTS")]
pub(crate) static OUT_PORTS: LpmTrie<PortKey, u8> =
    LpmTrie::with_max_entries(MAX_NAMESPACES * 16, 0);

/// One u64 per [`Counter`], per CPU.
#[map(name = "COUNTERS")]
pub(crate) static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Slots of `COUNTERS`: one per counter (one more in the upgrade test's next layout).
#[cfg(not(feature = "layout-next"))]
const COUNTER_SLOTS: u32 = Counter::COUNT;
#[cfg(feature = "layout-next")]
const COUNTER_SLOTS: u32 = Counter::COUNT + 1;

/// The redirected connection (netns + 4-tuple) -> its original destination, handed from the
/// application's socket (sock_ops `TCP_CONNECT_CB`) to the proxy's accepted socket, which
/// claims and deletes it when its handshake completes (`PASSIVE_ESTABLISHED_CB`). Each policy
/// may hold at most `HANDOFF_QUOTA` entries (counted in `HANDOFFS`).
#[map(name = "TRACKED")]
pub(crate) static TRACKED: HashMap<ConnKey, Tracked> =
    HashMap::with_max_entries(TRACKED_MAX_ENTRIES, BPF_F_NO_PREALLOC);

/// Policy key (netns cookie, or 0 for the default policy) -> its `TRACKED` entries now
/// (wrapping adds of +1 / -1; the loader removes a namespace's entry with its policy).
#[map(name = "HANDOFFS")]
pub(crate) static HANDOFFS: HashMap<u64, u64> =
    HashMap::with_max_entries(MAX_NAMESPACES + 1, BPF_F_NO_PREALLOC);

/// A connect made inside an enrolled namespace to one of its own addresses (netns + 4-tuple,
/// as `TRACKED` keys it) -> the socket's cookie, from sock_ops `TCP_CONNECT_CB` until the
/// socket leaves `SYN_SENT`: sk_lookup exempts a passthrough, loopback or own-address source
/// only when its connection is here (a SYN from the wire never is). Each namespace may hold
/// at most `HANDOFF_QUOTA` entries (counted in `LOCAL_COUNTS`).
#[map(name = "LOCAL_CONNECTS")]
pub(crate) static LOCAL_CONNECTS: HashMap<ConnKey, u64> =
    HashMap::with_max_entries(TRACKED_MAX_ENTRIES, BPF_F_NO_PREALLOC);

/// Netns cookie -> its `LOCAL_CONNECTS` entries now (wrapping adds, as `HANDOFFS`).
#[map(name = "LOCAL_COUNTS")]
pub(crate) static LOCAL_COUNTS: HashMap<u64, u64> =
    HashMap::with_max_entries(MAX_NAMESPACES + 1, BPF_F_NO_PREALLOC);

/// `TRACKED` entries one policy may hold at once (`--quota-handshakes`), set by the loader.
#[unsafe(no_mangle)]
static HANDOFF_QUOTA: u64 = 0;

/// The per-policy hand-off quota the loader set.
#[inline(always)]
pub(crate) fn handoff_quota() -> u64 {
    // SAFETY: a read of read-only data the loader filled in before loading.
    unsafe { core::ptr::read_volatile(&raw const HANDOFF_QUOTA) }
}

/// Inbound connections steered by sk_lookup (netns + 4-tuple) -> original destination (the
/// local address). LRU: a SYN that never completes must not leak an entry.
#[map(name = "INBOUND")]
pub(crate) static INBOUND: LruHashMap<ConnKey, Tracked> =
    LruHashMap::with_max_entries(INBOUND_MAX_ENTRIES, 0);

/// Netns cookie -> inbound policy of an enrolled namespace.
#[map(name = "NETNS_INBOUND")]
pub(crate) static NETNS_INBOUND: HashMap<u64, InboundPolicy> =
    HashMap::with_max_entries(MAX_NAMESPACES, BPF_F_NO_PREALLOC);

/// (netns cookie, port) -> PORT_EXCLUDED or PORT_INCLUDED; full-length keys, as `OUT_PORTS`.
#[map(name = "INBOUND_PORTS")]
pub(crate) static INBOUND_PORTS: LpmTrie<PortKey, u8> =
    LpmTrie::with_max_entries(MAX_NAMESPACES * 16, 0);

/// An enrolled namespace's own address -> its netns cookie (sk_lookup cannot read the cookie).
#[map(name = "POD_ADDRS")]
pub(crate) static POD_ADDRS: HashMap<AddrKey, u64> =
    HashMap::with_max_entries(MAX_NAMESPACES * 4, BPF_F_NO_PREALLOC);

/// (netns cookie, family) -> the proxy's inbound listener, filled by sock_ops TCP_LISTEN_CB.
#[map(name = "LISTENERS")]
pub(crate) static LISTENERS: SockHash<ListenerKey> =
    SockHash::with_max_entries(MAX_NAMESPACES * 2, 0);

/// Allocate hash entries on insert instead of up front: TRACKED alone would otherwise pin
/// ~40 MB; the per-namespace maps change only at enrollment. (LPM tries are always allocated on insert.)
const BPF_F_NO_PREALLOC: u32 = aya_ebpf::bindings::BPF_F_NO_PREALLOC;

/// (netns cookie, counter slot) -> count on this CPU: `redirect stats --netns`.
#[map(name = "NETNS_COUNTERS")]
pub(crate) static NETNS_COUNTERS: PerCpuHashMap<NsCounterKey, u64> =
    PerCpuHashMap::with_max_entries(MAX_NAMESPACES * 32, BPF_F_NO_PREALLOC);

/// Netns cookie -> number of sockets listening on its outbound port (sock_ops keeps it; the
/// loader seeds it for a proxy that listened before enrollment).
#[map(name = "PROXY_LISTENERS")]
pub(crate) static PROXY_LISTENERS: HashMap<u64, u64> =
    HashMap::with_max_entries(MAX_NAMESPACES, BPF_F_NO_PREALLOC);

/// Socket storage: per-socket marks and original destinations, gone with the socket.
#[btf_map]
pub(crate) static SOCK_STATE: SkStorage<SockState> = SkStorage::new();

/// The `SOCK_STATE` of socket `sk` (NULL-checked), created zeroed when `create` and absent.
#[inline(always)]
pub(crate) fn sock_state_of(sk: *mut bpf_sock, create: bool) -> Option<*mut SockState> {
    if sk.is_null() {
        return None;
    }
    let flags = if create {
        u64::from(BPF_SK_STORAGE_GET_F_CREATE)
    } else {
        0
    };
    // SAFETY: the map symbol is the map (relocated by the loader); `sk` is a full socket of
    // the program's context; with no initial value the helper zero-fills a created entry.
    let p = unsafe {
        bpf_sk_storage_get(
            core::ptr::from_ref(&SOCK_STATE).cast_mut().cast(),
            sk.cast(),
            core::ptr::null_mut(),
            flags,
        )
    };
    (!p.is_null()).then_some(p.cast::<SockState>())
}

/// The `SOCK_STATE` of the socket a sock_ops callback runs for, if it has one (or created).
#[inline(always)]
pub(crate) fn sock_state(ctx: &SockOpsContext, create: bool) -> Option<*mut SockState> {
    // SAFETY: the context is valid for the program run; `sk` may be NULL (checked).
    sock_state_of(unsafe { (*ctx.ops).__bindgen_anon_2.sk }, create)
}

/// Decisions streamed to `redirect trace` (only while `TRACE_ON[0]` is non-zero).
#[map(name = "TRACE")]
pub(crate) static TRACE: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Non-zero while a `redirect trace` is reading.
#[map(name = "TRACE_ON")]
pub(crate) static TRACE_ON: Array<u32> = Array::with_max_entries(1, 0);

/// Adds one to namespace `netns`'s counter on this CPU.
#[inline(always)]
pub(crate) fn count_ns(netns: u64, counter: Counter) {
    let key = NsCounterKey {
        netns: NetnsCookie(netns),
        slot: counter as u32,
        _pad: 0,
    };
    if let Some(slot) = NETNS_COUNTERS.get_ptr_mut(key) {
        // SAFETY: per-CPU value, valid for the program run; no other CPU writes it.
        unsafe { *slot += 1 };
    } else {
        let _ = NETNS_COUNTERS.insert(key, 1, 0);
    }
}

/// True while a tracer is attached.
#[inline(always)]
pub(crate) fn tracing_on() -> bool {
    TRACE_ON.get(0).is_some_and(|v| *v != 0)
}

/// Adds one to a decision counter on this CPU.
#[inline(always)]
pub(crate) fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot, valid for the program's lifetime; no other CPU writes it.
        unsafe { *slot += 1 };
    }
}
