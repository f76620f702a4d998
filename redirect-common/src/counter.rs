//! The decision counters: one slot per decision in `COUNTERS` / `NETNS_COUNTERS`.

/// Slots of `COUNTERS`: one per decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// connect4 rewrote the destination to the proxy.
    Redirected = 0,
    /// connect4 left it alone: the caller's uid is the proxy uid.
    BypassUid = 1,
    /// connect4 left it alone: the caller's gid is the proxy gid.
    BypassGid = 2,
    /// connect4 left it alone: the destination is in 127.0.0.0/8.
    Loopback = 3,
    /// connect4 left it alone: not a TCP socket.
    NotTcp = 4,
    /// getsockopt(SO_ORIGINAL_DST) answered from the tracking map.
    OrigDstHit = 5,
    /// getsockopt(SO_ORIGINAL_DST) found no entry; the kernel's answer stands.
    OrigDstMiss = 6,
    /// A map update failed (map full); the connection went through untracked.
    TrackError = 7,
    /// sk_lookup steered an inbound connection to the proxy's inbound listener.
    InboundSteered = 8,
    /// Inbound connection to an excluded port (`-d` list or the tunnel port): not captured.
    InboundExcludedPort = 9,
    /// Inbound connection to a port outside the `-b` list: not captured.
    InboundNotInList = 10,
    /// No inbound listener in the namespace: refused, or passed through when so configured.
    InboundNoListener = 11,
    /// Inbound connection from the proxy's passthrough source (127.0.0.6 / ::6): not captured.
    InboundPassthroughSource = 12,
    /// Connection from inside the pod to its own address: left to the outbound rules.
    InboundLocal = 13,
    /// connect4 left it alone: the destination is in an excluded CIDR (`-x`).
    ExcludedCidr = 14,
    /// Left alone: IPv6 in a namespace whose policy is not dual-stack.
    Ipv6Untouched = 15,
    /// Left alone: the namespace has no policy.
    NoPolicy = 16,
    /// The proxy connecting to its own pod (via `lo`, not 127.0.0.1): sent to the inbound port.
    InboundRedirectLocal = 17,
    /// Left alone: bound to the passthrough source 127.0.0.6 / ::6 (`-o lo -s 127.0.0.6`).
    PassthroughSource = 18,
    /// Left alone by the owner-group rules (`ISTIO_OUTBOUND_OWNER_GROUPS[_EXCLUDE]`).
    OwnerGroup = 19,
    /// DNS (port 53 to a configured server) sent to the DNS capture port.
    DnsRedirected = 20,
    /// Left alone: the destination is not in an included CIDR (`-i` list) or port (`-q`).
    NotIncluded = 21,
    /// Left alone: the destination port is excluded (`-o`).
    ExcludedPort = 22,
    /// Left alone: the route leaves through an excluded interface (`-c`).
    ExcludedInterface = 23,
    /// recvmsg/getpeername restored the original DNS server or peer as the source.
    PeerRestored = 24,
    /// Inbound connection arriving on an excluded (`-c`) or KubeVirt (`-k`) interface.
    InboundInterface = 25,
    /// A process with the proxy's uid/gid outside the proxy's cgroup: captured as an app.
    ProxyIdElsewhere = 26,
    /// The proxy does not listen yet and the policy says passthrough: left alone.
    NoProxyPassthrough = 27,
    /// The proxy does not listen yet and the policy says refuse: redirected (and refused).
    NoProxyRefused = 28,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; 29] = [
        Counter::Redirected,
        Counter::BypassUid,
        Counter::BypassGid,
        Counter::Loopback,
        Counter::NotTcp,
        Counter::OrigDstHit,
        Counter::OrigDstMiss,
        Counter::TrackError,
        Counter::InboundSteered,
        Counter::InboundExcludedPort,
        Counter::InboundNotInList,
        Counter::InboundNoListener,
        Counter::InboundPassthroughSource,
        Counter::InboundLocal,
        Counter::ExcludedCidr,
        Counter::Ipv6Untouched,
        Counter::NoPolicy,
        Counter::InboundRedirectLocal,
        Counter::PassthroughSource,
        Counter::OwnerGroup,
        Counter::DnsRedirected,
        Counter::NotIncluded,
        Counter::ExcludedPort,
        Counter::ExcludedInterface,
        Counter::PeerRestored,
        Counter::InboundInterface,
        Counter::ProxyIdElsewhere,
        Counter::NoProxyPassthrough,
        Counter::NoProxyRefused,
    ];
    /// Number of slots.
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// Stable snake_case name used in `redirect status` and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Redirected => "redirected",
            Counter::BypassUid => "bypass_uid",
            Counter::BypassGid => "bypass_gid",
            Counter::Loopback => "loopback",
            Counter::NotTcp => "not_tcp",
            Counter::OrigDstHit => "orig_dst_hit",
            Counter::OrigDstMiss => "orig_dst_miss",
            Counter::TrackError => "track_error",
            Counter::InboundSteered => "inbound_steered",
            Counter::InboundExcludedPort => "inbound_excluded_port",
            Counter::InboundNotInList => "inbound_not_in_list",
            Counter::InboundNoListener => "inbound_no_listener",
            Counter::InboundPassthroughSource => "inbound_passthrough_source",
            Counter::InboundLocal => "inbound_local",
            Counter::ExcludedCidr => "excluded_cidr",
            Counter::Ipv6Untouched => "ipv6_untouched",
            Counter::NoPolicy => "no_policy",
            Counter::InboundRedirectLocal => "inbound_redirect_local",
            Counter::PassthroughSource => "passthrough_source",
            Counter::OwnerGroup => "owner_group",
            Counter::DnsRedirected => "dns_redirected",
            Counter::NotIncluded => "not_included",
            Counter::ExcludedPort => "excluded_port",
            Counter::ExcludedInterface => "excluded_interface",
            Counter::PeerRestored => "peer_restored",
            Counter::InboundInterface => "inbound_interface",
            Counter::ProxyIdElsewhere => "proxy_id_elsewhere",
            Counter::NoProxyPassthrough => "no_proxy_passthrough",
            Counter::NoProxyRefused => "no_proxy_refused",
        }
    }
}
