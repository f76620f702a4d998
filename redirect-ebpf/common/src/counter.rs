//! Per-CPU decision counter slots, generated from one table: each counter's slot, stable
//! name, the istio-iptables rule it stands for and its meaning. Kernel, `redirect stats`,
//! `explain`, metrics and docs all read this table.

/// Declares [`Counter`] and its table: `Variant = slot, "name", "istio rule", "meaning"`.
macro_rules! counters {
    ($($(#[$doc:meta])* $variant:ident = $slot:literal, $name:literal, $rule:literal, $help:literal;)+) => {
        /// Decision counters, one slot each in the `COUNTERS` per-CPU array.
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Counter {
            $($(#[$doc])* #[doc = $help] $variant = $slot,)+
        }

        impl Counter {
            /// Every counter, in slot order.
            pub const ALL: [Counter; [$($slot),+].len()] = [$(Counter::$variant),+];

            /// Stable snake_case name used in `redirect status`, `stats` and metrics.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)+
                }
            }

            /// The istio-iptables rule the decision stands for (`(redirect)` marks ours).
            pub const fn rule(self) -> &'static str {
                match self {
                    $(Counter::$variant => $rule,)+
                }
            }

            /// What the counter means.
            pub const fn help(self) -> &'static str {
                match self {
                    $(Counter::$variant => $help,)+
                }
            }
        }
    };
}

counters! {
    Redirected = 0, "redirected", "-j ISTIO_REDIRECT (-i, or -p tcp --dport <-q>)",
        "A connect was rewritten to the outbound port.";
    BypassUid = 1, "bypass_uid", "-m owner --uid-owner <-u> -j RETURN",
        "Left alone: the caller's uid is a proxy uid.";
    BypassGid = 2, "bypass_gid", "-m owner --gid-owner <-g> -j RETURN",
        "Left alone: the caller's gid is a proxy gid.";
    Loopback = 3, "loopback", "-o lo -m owner ! --uid-owner <-u> -j RETURN, or -d 127.0.0.1/32 -j RETURN",
        "Left alone: a loopback or own-address destination.";
    NotTcp = 4, "not_tcp", "ISTIO_REDIRECT only rewrites -p tcp",
        "Left alone: not a TCP socket.";
    OrigDstHit = 5, "orig_dst_hit", "SO_ORIGINAL_DST answered (conntrack's original destination)",
        "getsockopt(SO_ORIGINAL_DST) answered from the tracking maps.";
    OrigDstMiss = 6, "orig_dst_miss", "SO_ORIGINAL_DST with no entry: the kernel's answer stands",
        "getsockopt(SO_ORIGINAL_DST) found no entry; the kernel's answer stands.";
    TrackError = 7, "track_error", "(redirect) TRACKED full: SO_ORIGINAL_DST cannot be answered",
        "The connect's TRACKED entry could not be written; the connection went to the proxy untracked.";
    InboundSteered = 8, "inbound_steered", "ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT (REDIRECT --to-ports <-z>)",
        "sk_lookup steered an inbound connection to the proxy's inbound listener.";
    InboundExcludedPort = 9, "inbound_excluded_port", "ISTIO_INBOUND -p tcp --dport <-e, -d> -j RETURN",
        "Inbound connection to an excluded port (-d list or the tunnel port): not captured.";
    InboundNotInList = 10, "inbound_not_in_list", "PREROUTING: only -p tcp --dport <-b> -j ISTIO_INBOUND",
        "Inbound connection to a port outside the -b list: not captured.";
    InboundNoListener = 11, "inbound_no_listener", "REDIRECT --to-ports <-z> with nothing listening: refused",
        "No inbound listener in the namespace: refused, or passed through when so configured.";
    InboundPassthroughSource = 12, "inbound_passthrough_source", "(not in PREROUTING) the proxy's \
        hop from 127.0.0.6/::6 to the application",
        "Inbound connection from the proxy's passthrough source (127.0.0.6 / ::6): not captured.";
    InboundLocal = 13, "inbound_local", "(not in PREROUTING) the pod's own connection, decided by OUTPUT",
        "Connection from inside the pod to its own address: left to the outbound rules.";
    ExcludedCidr = 14, "excluded_cidr", "-d <-x> -j RETURN",
        "Left alone: the destination is in an excluded CIDR (-x).";
    Ipv6Untouched = 15, "ipv6_untouched", "no ip6tables rules (the namespace is not dual-stack)",
        "Left alone: IPv6 in a namespace whose policy is not dual-stack.";
    NoPolicy = 16, "no_policy", "no rules in this namespace",
        "Left alone: the namespace has no policy.";
    InboundRedirectLocal = 17, "inbound_redirect_local", "-o lo ! -d 127.0.0.1/32 -p tcp ! --dport \
        <-e> -m owner --uid-owner <-u> -j ISTIO_IN_REDIRECT",
        "The proxy connecting to its own pod (via lo, not 127.0.0.1): sent to the inbound port.";
    PassthroughSource = 18, "passthrough_source", "-o lo -s 127.0.0.6/32 -j RETURN",
        "Left alone: bound to the passthrough source 127.0.0.6 / ::6.";
    OwnerGroup = 19, "owner_group", "-m owner [!] --gid-owner <owner groups> -j RETURN",
        "Left alone by the owner-group rules (ISTIO_OUTBOUND_OWNER_GROUPS[_EXCLUDE]).";
    DnsRedirected = 20, "dns_redirected", "ISTIO_OUTPUT_DNS: --dport 53 -j REDIRECT --to-ports 15053",
        "DNS (port 53 to a configured server) sent to the DNS capture port.";
    NotIncluded = 21, "not_included", "end of ISTIO_OUTPUT (outside -i and -q)",
        "Left alone: the destination is not in an included CIDR (-i) or port (-q).";
    ExcludedPort = 22, "excluded_port", "-p tcp|udp --dport <-o> -j RETURN",
        "Left alone: the destination port is excluded (-o).";
    ExcludedInterface = 23, "excluded_interface", "OUTPUT -o <-c> -j RETURN",
        "Left alone: the route leaves through an excluded interface (-c).";
    PeerRestored = 24, "peer_restored", "(redirect) getpeername/recvmsg show the original peer, as after DNAT",
        "recvmsg/getpeername restored the original DNS server or peer as the source.";
    InboundInterface = 25, "inbound_interface", "PREROUTING -i <-c, -k> -j RETURN",
        "Inbound connection arriving on an excluded (-c) or KubeVirt (-k) interface: not steered.";
    ProxyIdElsewhere = 26, "proxy_id_elsewhere", "(redirect) proxy uid/gid outside --proxy-cgroup: not the proxy",
        "A process with the proxy's uid/gid outside the proxy's cgroup: captured as an application.";
    NoProxyPassthrough = 27, "no_proxy_passthrough", "(redirect) the proxy does not listen yet: --no-proxy passthrough",
        "The proxy does not listen yet and the policy says passthrough: left alone.";
    NoProxyRefused = 28, "no_proxy_refused", "(redirect) the proxy does not listen yet: --no-proxy refuse",
        "The proxy does not listen yet and the policy says refuse: sent to the closed port.";
    StateError = 29, "state_error", "(redirect) no socket storage: getpeername and the TRACKED \
        hand-off lose the original destination",
        "A captured socket's original destination could not be kept in its socket storage; it was \
            redirected anyway (fail closed).";
    InboundTrackError = 30, "inbound_track_error", "(redirect) INBOUND full: SO_ORIGINAL_DST of the \
        steered connection falls back to its local address",
        "sk_lookup steered a connection but could not record it in INBOUND.";
    ListenerError = 31, "listener_error", "(redirect) LISTENERS update failed: the proxy's inbound \
        listener is not known",
        "The proxy's inbound listener could not be put into LISTENERS; inbound connections are \
            refused until it listens again.";
    HandoffQuota = 32, "handoff_quota", "(redirect) the policy has its --quota-handshakes \
        connections in hand-off: SO_ORIGINAL_DST unanswered",
        "A captured connect went to the proxy without a TRACKED hand-off: its namespace already has \
            its quota of connections whose proxy side has not completed the handshake.";
    LocalQuota = 33, "local_quota", "(redirect) the pod's connect to itself could not be recorded \
        (--quota-handshakes or LOCAL_CONNECTS full): sk_lookup captures it",
        "A connect inside the pod to one of its own addresses could not be recorded in \
            LOCAL_CONNECTS (its namespace has its quota of such connects in handshake, or the map \
            is full): sk_lookup steers it to the proxy instead of exempting it (fail closed).";
    TproxyLocal = 34, "tproxy_local", "mangle: OUTPUT ! -d 127.0.0.1/32 -p tcp -o lo -m owner \
        --uid-owner|--gid-owner <-u|-g> -j MARK --set-mark 1338; PREROUTING ISTIO_TPROXY -j TPROXY \
        --on-port <-z>",
        "TPROXY mode: the proxy's own connect (its uid or gid, not marked 1337, not from 127.0.0.6) \
            to an address of its pod that nat left alone: sent to the inbound port, its address \
            kept.";
}

impl Counter {
    /// Number of slots.
    pub const COUNT: u32 = Self::ALL.len() as u32;
}

// Slots are 0..COUNT in order, so every slot below COUNT is a counter (the BPF side turns a
// decision word's slot back into its counter by that).
const _: () = {
    let mut i = 0;
    while i < Counter::ALL.len() {
        assert!(Counter::ALL[i] as usize == i);
        i += 1;
    }
    assert!(Counter::ALL.len() <= 256);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_dense_and_names_unique() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as u32 as usize, i, "{c:?}");
            assert!(!c.rule().is_empty() && !c.help().is_empty(), "{c:?}");
            let same = Counter::ALL.iter().filter(|o| o.name() == c.name()).count();
            assert_eq!(same, 1, "{}", c.name());
        }
    }

    #[test]
    fn architecture_lists_every_counter() {
        let doc = include_str!("../../../ARCHITECTURE.md");
        for c in Counter::ALL {
            // "| SLOT | `NAME` |" without an allocator: find the name, check the slot before it.
            let mut digits = [0u8; 3];
            let slot = c as u32;
            let n = if slot >= 10 { 2 } else { 1 };
            if n == 2 {
                digits[0] = b'0' + (slot / 10) as u8;
            }
            digits[n - 1] = b'0' + (slot % 10) as u8;
            let slot = core::str::from_utf8(&digits[..n]).unwrap_or("?");
            let found = doc.lines().any(|l| {
                l.strip_prefix("| ")
                    .and_then(|l| l.strip_prefix(slot))
                    .and_then(|l| l.strip_prefix(" | `"))
                    .and_then(|l| l.strip_prefix(c.name()))
                    .is_some_and(|l| l.starts_with("` |"))
            });
            assert!(
                found,
                "ARCHITECTURE.md lacks the counters row of {}",
                c.name()
            );
        }
    }
}
