//! The feature list: every kernel feature the datapath uses, in the order docs/developer.md lists
//! them, with what needs it, the release that added it and how it is probed.
use aya::{maps::MapType, programs::ProgramType, sys::BpfHelper};

use super::{f, Check, Feature};

use BpfHelper as H;
use ProgramType as P;

/// sk_lookup's `ingress_ifindex`: the one optional feature.
pub(crate) const INGRESS_IFINDEX_FEATURE: Feature = f(
    super::INGRESS_IFINDEX,
    "sk_lookup ingress_ifindex",
    "inbound -c/-k (excluded and KubeVirt interfaces)",
    "5.17",
    Check::SkLookupIngressIfindex,
)
.optional(
    "sk_lookup runs redirect_sk_lookup_no_ifindex (the arrival interface unknown) and policies with \
        inbound -c/-k are refused",
);

/// Every feature the datapath uses, in the order docs/developer.md lists them.
pub(crate) const FEATURES: &[Feature] = &[
    f(
        "cgroup_sock_addr",
        "cgroup_sock_addr programs",
        "connect4/6, sendmsg/recvmsg, getpeername (capture)",
        "4.17",
        Check::Program(P::CgroupSockAddr),
    ),
    f(
        "sock_ops",
        "sock_ops programs",
        "sock_ops (tracking, listeners)",
        "4.13",
        Check::Program(P::SockOps),
    ),
    f(
        "cgroup_sockopt",
        "cgroup_sockopt programs",
        "getsockopt (SO_ORIGINAL_DST)",
        "5.3",
        Check::Program(P::CgroupSockopt),
    ),
    f(
        "sk_lookup",
        "sk_lookup programs",
        "sk_lookup (inbound capture)",
        "5.9",
        Check::Program(P::SkLookup),
    ),
    INGRESS_IFINDEX_FEATURE,
    f(
        "netns_cookie_sock_addr",
        "bpf_get_netns_cookie in cgroup_sock_addr",
        "per-namespace policy of the capture hooks",
        "5.7",
        Check::Helper(P::CgroupSockAddr, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "netns_cookie_sockopt",
        "bpf_get_netns_cookie in cgroup_sockopt",
        "getsockopt's per-namespace tracking key",
        "5.8",
        Check::Helper(P::CgroupSockopt, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "netns_cookie_sock_ops",
        "bpf_get_netns_cookie in sock_ops",
        "sock_ops' per-namespace tracking key",
        "5.15",
        Check::Helper(P::SockOps, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "socket_cookie_sock_ops",
        "bpf_get_socket_cookie in sock_ops",
        "the TRACKED hand-off's owner",
        "5.0",
        Check::Helper(P::SockOps, H::BPF_FUNC_get_socket_cookie),
    ),
    f(
        "ancestor_cgroup_sock_addr",
        "bpf_get_current_ancestor_cgroup_id in cgroup_sock_addr",
        "--bind-proxy-cgroup (the proxy identified by its cgroup)",
        "5.7",
        Check::Helper(
            P::CgroupSockAddr,
            H::BPF_FUNC_get_current_ancestor_cgroup_id,
        ),
    ),
    f(
        "sk_storage_get_sock_addr",
        "bpf_sk_storage_get in cgroup_sock_addr",
        "the original destination in SOCK_STATE (connect, sendmsg, getpeername, recvmsg, bind)",
        "5.3",
        Check::Helper(P::CgroupSockAddr, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "sk_storage_get_sock_ops",
        "bpf_sk_storage_get in sock_ops",
        "the hand-off claim and counting only the proxy's listeners (PROXY_LISTENERS)",
        "5.3",
        Check::Helper(P::SockOps, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "sk_storage_get_sockopt",
        "bpf_sk_storage_get in cgroup_sockopt",
        "SO_ORIGINAL_DST from the proxy socket's claimed destination",
        "5.3",
        Check::Helper(P::CgroupSockopt, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "sk_assign",
        "bpf_sk_assign in sk_lookup",
        "sk_lookup steering to the proxy's listener",
        "5.9",
        Check::Helper(P::SkLookup, H::BPF_FUNC_sk_assign),
    ),
    f(
        "lpm_trie",
        "LPM trie maps",
        "-i/-x CIDRs, -c routes, port rules (-o/-q/-b/-d)",
        "4.11",
        Check::Map(MapType::LpmTrie),
    ),
    f(
        "lru_hash",
        "LRU hash maps",
        "INBOUND",
        "4.10",
        Check::Map(MapType::LruHash),
    ),
    f(
        "sockhash",
        "sockhash maps",
        "LISTENERS (the proxy's inbound listener)",
        "4.18",
        Check::Map(MapType::SockHash),
    ),
    f(
        "percpu_hash",
        "per-CPU hash maps",
        "NETNS_COUNTERS",
        "4.6",
        Check::Map(MapType::PerCpuHash),
    ),
    f(
        "sk_storage_map",
        "socket storage maps",
        "SOCK_STATE (per-socket marks and original destinations)",
        "5.2",
        Check::Map(MapType::SkStorage),
    ),
    f(
        "ringbuf",
        "ring buffer maps",
        "TRACE (redirect trace)",
        "5.8",
        Check::Map(MapType::RingBuf),
    ),
];
