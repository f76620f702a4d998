//! istio-iptables' nat `OUTPUT` chain as one function, rule by rule, TPROXY mode's mangle rule
//! for the proxy's own connects, and the two rules of ours layered on them (the proxy's
//! cgroup, the proxy not listening yet).
use super::*;
use crate::{types::PASSTHROUGH_V6, Counter, AF_INET, AF_INET6};

/// The destination leaves through `lo`: loopback, or the unspecified address, which the kernel
/// routes to the host itself (it becomes 127.0.0.1 / `::1` before nat `OUTPUT` sees it).
#[inline(always)]
pub fn is_loopback(family: u16, dst: &[u32; 4]) -> bool {
    if family == AF_INET {
        dst[0].to_ne_bytes()[0] == 127 || dst[0] == 0
    } else {
        dst[0] | dst[1] | dst[2] == 0 && (dst[3] == u32::from_be(1) || dst[3] == 0)
    }
}

/// `-d 127.0.0.1/32` / `-d ::1/128` as the mangle rules write it (the unspecified address is
/// routed there), whatever the loopback CIDR.
#[inline(always)]
fn is_localhost(family: u16, dst: &[u32; 4]) -> bool {
    if family == AF_INET {
        dst[0] == u32::from_ne_bytes([127, 0, 0, 1]) || dst[0] == 0
    } else {
        dst[0] | dst[1] | dst[2] == 0 && (dst[3] == u32::from_be(1) || dst[3] == 0)
    }
}

/// `::6`, the proxy's IPv6 passthrough source, which istio-proxy puts on lo: traffic to it
/// leaves through lo like 127.0.0.6 (loopback already). It is never one of the namespace's
/// addresses in `POD_ADDRS`: every dual-stack pod has it, and that map is keyed by address.
#[inline(always)]
fn is_passthrough_v6(family: u16, dst: &[u32; 4]) -> bool {
    family == AF_INET6 && *dst == PASSTHROUGH_V6
}

/// `-d 127.0.0.1/32` (or the loopback CIDR) / `-d ::1/128`; the unspecified address matches as
/// the 127.0.0.1 / `::1` it is routed to. The destination itself is never rewritten: a second
/// copy of it doubled the verifier's states on 6.1 (sendmsg6 went over the limit).
#[inline(always)]
fn is_loopback_dst(p: &OutboundPolicy, family: u16, dst: &[u32; 4]) -> bool {
    if family == AF_INET {
        let d = if dst[0] == 0 {
            u32::from_ne_bytes([127, 0, 0, 1])
        } else {
            dst[0]
        };
        d & p.loopback_v4_mask == p.loopback_v4 & p.loopback_v4_mask
    } else {
        is_loopback(family, dst)
    }
}

#[inline(always)]
fn is_dns_server(p: &OutboundPolicy, conn: &Conn) -> bool {
    if p.has(OUT_DNS_ALL) {
        return true;
    }
    let mut i = 0;
    if conn.family == AF_INET {
        while i < MAX_DNS {
            if i >= p.n_dns_v4 as usize {
                break;
            }
            if p.dns_v4[i] == conn.dst[0] {
                return true;
            }
            i += 1;
        }
    } else {
        while i < MAX_DNS {
            if i >= p.n_dns_v6 as usize {
                break;
            }
            if p.dns_v6[i] == conn.dst {
                return true;
            }
            i += 1;
        }
    }
    false
}

/// Whether `id` is one of the first `n` of `ids`. Stops at the first match: the paths that
/// leave early differ only in the dead index, so the verifier prunes them.
#[inline(always)]
fn contains(ids: &[u32; MAX_OWNERS], n: u8, id: u32) -> bool {
    let mut i = 0;
    while i < MAX_OWNERS {
        if i >= n as usize {
            return false;
        }
        if ids[i] == id {
            return true;
        }
        i += 1;
    }
    false
}

/// The owner triplets of `ISTIO_OUTPUT` for one kind (`--uid-owner` for each `-u`, then
/// `--gid-owner` for each `-g`), per owner X in order:
/// `-o lo ! -d LOOP -p tcp ! --dport TUNNEL[,53] -m owner X -j ISTIO_IN_REDIRECT`,
/// `-o lo [-p tcp ! --dport 53] -m owner ! X -j RETURN` (unless omitted),
/// `-m owner X -j RETURN`.
/// Only the middle rule depends on which X fails to match, and only through "not X": so the
/// chain is decided by the first owner (matched, or the lo RETURN fires), else by whether any
/// later owner matches. Evaluated that way, without a loop of branches (the verifier's cost).
#[inline(always)]
fn owner_rules(
    p: &OutboundPolicy,
    conn: &Conn,
    on_lo: bool,
    (first, any): (bool, bool),
    is_uid: bool,
    no_lo_return: bool,
) -> Option<Verdict> {
    let dns = p.has(OUT_DNS);
    let lo_return = !no_lo_return && on_lo && (!dns || (conn.tcp && conn.dport != 53));
    if !first {
        // The first owner did not match: its lo RETURN, else a later owner's match.
        if lo_return {
            return Some(Verdict::Pass(Counter::Loopback));
        }
        if !any {
            return None;
        }
    }
    if on_lo
        && conn.tcp
        && !is_loopback_dst(p, conn.family, &conn.dst)
        && conn.dport != p.tunnel_port
        && !(dns && is_uid && conn.dport == 53)
    {
        return Some(Verdict::Redirect(
            p.inbound_port,
            Counter::InboundRedirectLocal,
        ));
    }
    Some(Verdict::Pass(if is_uid {
        Counter::BypassUid
    } else {
        Counter::BypassGid
    }))
}

/// With a proxy cgroup, the owner match also needs the caller to be inside it.
#[inline(always)]
fn proxy_place(p: &OutboundPolicy, conn: &Conn) -> bool {
    !p.has(OUT_PROXY_CGROUP) || conn.in_proxy_cgroup
}

/// Whether `(uid, gid)` (in the proxy's cgroup or not) is the namespace's proxy: one of its
/// uids or gids, and inside its cgroup when the policy binds one.
#[inline(always)]
pub fn is_proxy(p: &OutboundPolicy, uid: u32, gid: u32, in_proxy_cgroup: bool) -> bool {
    if p.has(OUT_PROXY_CGROUP) && !in_proxy_cgroup {
        return false;
    }
    contains(&p.uids, p.n_uids, uid) || contains(&p.gids, p.n_gids, gid)
}

/// True when the caller has a proxy uid or gid but runs outside the proxy's cgroup: it is
/// captured like an application (and worth a warning: seed 1's silent bypass).
#[inline(always)]
pub fn proxy_id_elsewhere(p: &OutboundPolicy, conn: &Conn) -> bool {
    p.has(OUT_PROXY_CGROUP) && !conn.in_proxy_cgroup && is_proxy(p, conn.uid, conn.gid, true)
}

/// Evaluates istio-iptables' `OUTPUT` chains for `conn`: nat's, and in TPROXY mode the
/// mangle rule that sends the proxy's own connects to its pod to the inbound port.
#[inline(always)]
pub fn decide<L: Lookups>(p: &OutboundPolicy, conn: &Conn, lk: &L) -> Verdict {
    if !p.has(OUT_ENABLED) {
        return Verdict::Pass(Counter::NoPolicy);
    }
    if conn.family == AF_INET6 && !p.has(OUT_IPV6) {
        return Verdict::Pass(Counter::Ipv6Untouched);
    }
    let on_lo = is_loopback(conn.family, &conn.dst)
        || is_passthrough_v6(conn.family, &conn.dst)
        || lk.is_own_addr(conn);
    let v = nat(p, conn, lk, on_lo);
    if p.has(OUT_TPROXY) && is_tproxy_local(p, conn, on_lo, v) && lk.tproxy_takes(conn) {
        Verdict::Redirect(p.inbound_port, Counter::TproxyLocal)
    } else {
        v
    }
}

/// TPROXY mode's mangle table for a connect nat left alone (`v`): `OUTPUT -p tcp -o lo -m mark
/// --mark 1337 -j RETURN`, then `! -d 127.0.0.1/32 -p tcp -o lo -m owner --uid-owner U` (each
/// `-u`, then `--gid-owner G` each `-g`) `-j MARK --set-mark 1338`; on lo's way in,
/// `ISTIO_INBOUND` returns for mark 1337, for `-s 127.0.0.6/32` and for any mark but 1338,
/// and `ISTIO_TPROXY ! -d 127.0.0.1/32` sends the rest, on the ports inbound capture takes
/// (the caller's [`Lookups::tproxy_takes`]), to the inbound port. So the proxy's plain connect
/// to its own pod lands on 15006 (as uid 0 / gid 1337 in a TPROXY pod nat lets it through),
/// while its transparent hop to the application (marked 1337) does not.
#[inline(always)]
fn is_tproxy_local(p: &OutboundPolicy, conn: &Conn, on_lo: bool, v: Verdict) -> bool {
    matches!(v, Verdict::Pass(_))
        && on_lo
        && conn.tcp
        && !conn.tproxy_marked
        && !conn.passthrough_src
        && !is_localhost(conn.family, &conn.dst)
        && is_proxy(p, conn.uid, conn.gid, conn.in_proxy_cgroup)
}

/// istio-iptables' nat `OUTPUT` / `ISTIO_OUTPUT` chain, rule by rule (`on_lo`: the destination
/// leaves through lo).
#[inline(always)]
fn nat<L: Lookups>(p: &OutboundPolicy, conn: &Conn, lk: &L, on_lo: bool) -> Verdict {
    let v6 = conn.family == AF_INET6;
    // OUTPUT -o <excluded nic> -j RETURN
    if !on_lo && p.has(OUT_HAS_EXCLUDED_NIC) && lk.via_excluded_nic(conn) {
        return Verdict::Pass(Counter::ExcludedInterface);
    }
    let ports = if p.has(OUT_HAS_PORTS) {
        lk.port_rule(conn)
    } else {
        0
    };
    // -p tcp|udp --dport P -j RETURN (-o), ahead of everything else in ISTIO_OUTPUT.
    if ports & OUT_PORT_EXCLUDE != 0 {
        return Verdict::Pass(Counter::ExcludedPort);
    }
    // -o lo -s 127.0.0.6/32 -j RETURN
    if on_lo && conn.passthrough_src {
        return Verdict::Pass(Counter::PassthroughSource);
    }
    let no_lo_return = p.has(if v6 {
        OUT_NO_LO_RETURN_V6
    } else {
        OUT_NO_LO_RETURN_V4
    });
    let place = proxy_place(p, conn);
    if p.n_uids > 0 {
        let first = place && conn.uid == p.uids[0];
        let any = place && contains(&p.uids, p.n_uids, conn.uid);
        if let Some(v) = owner_rules(p, conn, on_lo, (first, any), true, no_lo_return) {
            return v;
        }
    }
    if p.n_gids > 0 {
        let first = place && conn.gid == p.gids[0];
        let any = place && contains(&p.gids, p.n_gids, conn.gid);
        if let Some(v) = owner_rules(p, conn, on_lo, (first, any), false, no_lo_return) {
            return v;
        }
    }
    if p.has(OUT_GROUPS_INCLUDE | OUT_GROUPS_EXCLUDE)
        && contains(&p.groups, p.n_groups, conn.gid) == p.has(OUT_GROUPS_EXCLUDE)
    {
        return Verdict::Pass(Counter::OwnerGroup);
    }
    // -j ISTIO_OUTPUT_DNS: -p tcp|udp --dport 53 [-d server] -j REDIRECT --to-ports 15053
    if p.has(OUT_DNS) && conn.dport == 53 && is_dns_server(p, conn) {
        return Verdict::Redirect(p.dns_port, Counter::DnsRedirected);
    }
    // -d 127.0.0.1/32 -j RETURN
    if is_loopback_dst(p, conn.family, &conn.dst) {
        return Verdict::Pass(Counter::Loopback);
    }
    if !conn.tcp {
        // ISTIO_REDIRECT only rewrites TCP.
        return Verdict::Pass(Counter::NotTcp);
    }
    // -d X -j RETURN (-x)
    if lk.excluded_cidr(conn) {
        return Verdict::Pass(Counter::ExcludedCidr);
    }
    // -p tcp --dport P -j ISTIO_REDIRECT (-q)
    if conn.tcp && ports & OUT_PORT_INCLUDE != 0 {
        return Verdict::Redirect(p.proxy_port, Counter::Redirected);
    }
    // -j ISTIO_REDIRECT (-i '*') or -d X -j ISTIO_REDIRECT (-i list)
    let all = p.has(if v6 {
        OUT_INCLUDE_ALL_V6
    } else {
        OUT_INCLUDE_ALL_V4
    });
    if all || lk.included_cidr(conn) {
        return Verdict::Redirect(p.proxy_port, Counter::Redirected);
    }
    Verdict::Pass(Counter::NotIncluded)
}

/// The app-before-proxy rule on top of [`decide`]: a connect sent to the outbound port of a
/// namespace (with a policy of its own) whose proxy does not listen yet is left alone with
/// [`OUT_NO_PROXY_PASSTHROUGH`], else still sent there (and refused) and counted.
#[inline(always)]
pub fn when_proxy_down(
    p: &OutboundPolicy,
    v: Verdict,
    own_policy: bool,
    proxy_up: bool,
) -> Verdict {
    match v {
        Verdict::Redirect(port, _) if own_policy && port == p.proxy_port && !proxy_up => {
            if p.has(OUT_NO_PROXY_PASSTHROUGH) {
                Verdict::Pass(Counter::NoProxyPassthrough)
            } else {
                Verdict::Redirect(port, Counter::NoProxyRefused)
            }
        }
        v => v,
    }
}
