//! Maps shared by the hooks, and the per-CPU decision counters.
use aya_ebpf::{
    macros::map,
    maps::{lpm_trie::Key, Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, SockHash},
};
use redirect_common::{
    AddrKey, Config, ConnKey, Counter, InboundPolicy, ListenerKey, OrigDst, PortKey, Tracked,
    EXCLUDE_MAX_ENTRIES, INBOUND_MAX_ENTRIES, MAX_NAMESPACES, PENDING_MAX_ENTRIES,
    TRACKED_MAX_ENTRIES,
};

/// The capture policy (one entry), written by user space before attaching.
#[map(name = "CONFIG")]
pub static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

/// One u64 per [`Counter`], per CPU.
#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Socket cookie of a connecting socket -> original destination (connect4 -> sock_ops).
/// LRU so that a connect that fails before `tcp_connect()` cannot leak an entry for ever.
#[map(name = "PENDING")]
pub static PENDING: LruHashMap<u64, OrigDst> = LruHashMap::with_max_entries(PENDING_MAX_ENTRIES, 0);

/// The redirected connection (netns + 4-tuple) -> original destination (sock_ops -> getsockopt).
#[map(name = "TRACKED")]
pub static TRACKED: HashMap<ConnKey, Tracked> =
    HashMap::with_max_entries(TRACKED_MAX_ENTRIES, BPF_F_NO_PREALLOC);

/// Inbound connections steered by sk_lookup (netns + 4-tuple) -> original destination (the
/// local address). LRU: a SYN that never completes must not leak an entry.
#[map(name = "INBOUND")]
pub static INBOUND: LruHashMap<ConnKey, Tracked> =
    LruHashMap::with_max_entries(INBOUND_MAX_ENTRIES, 0);

/// Netns cookie -> inbound policy of an enrolled namespace.
#[map(name = "NETNS_INBOUND")]
pub static NETNS_INBOUND: HashMap<u64, InboundPolicy> =
    HashMap::with_max_entries(MAX_NAMESPACES, BPF_F_NO_PREALLOC);

/// (netns cookie, port) -> PORT_EXCLUDED or PORT_INCLUDED.
#[map(name = "INBOUND_PORTS")]
pub static INBOUND_PORTS: HashMap<PortKey, u8> =
    HashMap::with_max_entries(MAX_NAMESPACES * 16, BPF_F_NO_PREALLOC);

/// An enrolled namespace's own address -> its netns cookie (sk_lookup cannot read the cookie).
#[map(name = "POD_ADDRS")]
pub static POD_ADDRS: HashMap<AddrKey, u64> =
    HashMap::with_max_entries(MAX_NAMESPACES * 4, BPF_F_NO_PREALLOC);

/// (netns cookie, family) -> the proxy's inbound listener, filled by sock_ops TCP_LISTEN_CB.
#[map(name = "LISTENERS")]
pub static LISTENERS: SockHash<ListenerKey> = SockHash::with_max_entries(MAX_NAMESPACES * 2, 0);

/// Outbound IPv4 destinations never captured (istio-iptables -x), longest-prefix match.
#[map(name = "EXCLUDE_V4")]
pub static EXCLUDE_V4: LpmTrie<u32, u8> = LpmTrie::with_max_entries(EXCLUDE_MAX_ENTRIES, 0);

/// True when the network-order IPv4 address is in an excluded CIDR.
#[inline(always)]
pub fn excluded_v4(addr: u32) -> bool {
    EXCLUDE_V4.get(Key::new(32, addr)).is_some()
}

/// Allocate hash entries on insert instead of up front: TRACKED alone would otherwise pin
/// ~40 MB; the per-namespace maps change only at enrollment.
const BPF_F_NO_PREALLOC: u32 = aya_ebpf::bindings::BPF_F_NO_PREALLOC;

/// Reads the policy; `None` only if user space never wrote it (the loader always does).
#[inline(always)]
pub fn config() -> Option<&'static Config> {
    CONFIG.get(0)
}

/// Adds one to a decision counter on this CPU.
#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot, valid for the program's lifetime; no other CPU writes it.
        unsafe { *slot += 1 };
    }
}
