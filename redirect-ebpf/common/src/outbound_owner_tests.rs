//! The owner rules of `decide` against istio-iptables' `ISTIO_OUTPUT` owner triplets written
//! out rule by rule (one triplet per `-u`, then per `-g`, each rule tried in order), over every
//! combination of short owner lists, callers, destinations, protocols, ports and flags.
use crate::{
    outbound::*,
    outbound_fake::{OnePod, POD},
    Counter, AF_INET,
};

/// The pod, with no inbound capture (TPROXY's mangle rule takes nothing).
const NO_INBOUND: OnePod = OnePod { inbound_but: None };

const OWN: u32 = u32::from_ne_bytes(POD);

/// The triplets, literally: `-o lo ! -d LOOP -p tcp ! --dport TUNNEL[,53] -m owner X -j
/// ISTIO_IN_REDIRECT`, `-o lo [-p tcp ! --dport 53] -m owner ! X -j RETURN` (unless
/// omitted), `-m owner X -j RETURN`, for X = each uid, then each gid.
fn triplets(p: &OutboundPolicy, c: &Conn, on_lo: bool, loopback_dst: bool) -> Option<Verdict> {
    let dns = p.flags & OUT_DNS != 0;
    let no_lo_return = p.flags & OUT_NO_LO_RETURN_V4 != 0;
    let place = p.flags & OUT_PROXY_CGROUP == 0 || c.in_proxy_cgroup;
    let kinds = [
        (&p.uids[..p.n_uids as usize], c.uid, true),
        (&p.gids[..p.n_gids as usize], c.gid, false),
    ];
    for (ids, id, is_uid) in kinds {
        for x in ids {
            let matches = id == *x && place;
            let tunnel = c.dport == p.tunnel_port || (dns && is_uid && c.dport == 53);
            if on_lo && !loopback_dst && c.tcp && !tunnel && matches {
                return Some(Verdict::Redirect(
                    p.inbound_port,
                    Counter::InboundRedirectLocal,
                ));
            }
            if !no_lo_return && on_lo && (!dns || (c.tcp && c.dport != 53)) && !matches {
                return Some(Verdict::Pass(Counter::Loopback));
            }
            if matches {
                return Some(Verdict::Pass(if is_uid {
                    Counter::BypassUid
                } else {
                    Counter::BypassGid
                }));
            }
        }
    }
    None
}

/// Every owner list of at most two ids from {1, 2, 3}.
fn lists() -> impl Iterator<Item = ([u32; MAX_OWNERS], u8)> {
    (0..13u32).map(|k| {
        let mut ids = [0; MAX_OWNERS];
        let n = match k {
            0 => 0,
            1..=3 => {
                ids[0] = k;
                1
            }
            _ => {
                ids[0] = (k - 4) / 3 + 1;
                ids[1] = (k - 4) % 3 + 1;
                2
            }
        };
        (ids, n)
    })
}

#[test]
fn owner_rules_match_the_triplets_written_out() {
    let dsts = [
        (OWN, true, false),
        (u32::from_ne_bytes([127, 0, 0, 1]), true, true),
        (u32::from_ne_bytes([127, 0, 0, 5]), true, false),
        (u32::from_ne_bytes([198, 18, 0, 2]), false, false),
    ];
    let mut checked = 0u32;
    for (uids, n_uids) in lists() {
        for (gids, n_gids) in lists() {
            for flags in 0..8u32 {
                let mut p = OutboundPolicy::ZERO;
                p.flags = OUT_ENABLED | OUT_INCLUDE_ALL_V4;
                if flags & 1 != 0 {
                    p.flags |= OUT_DNS | OUT_DNS_ALL;
                }
                if flags & 2 != 0 {
                    p.flags |= OUT_NO_LO_RETURN_V4;
                }
                if flags & 4 != 0 {
                    p.flags |= OUT_PROXY_CGROUP;
                }
                (p.uids, p.n_uids, p.gids, p.n_gids) = (uids, n_uids, gids, n_gids);
                p.loopback_v4 = u32::from_ne_bytes([127, 0, 0, 1]);
                p.loopback_v4_mask = u32::MAX;
                (p.proxy_port, p.inbound_port, p.tunnel_port, p.dns_port) =
                    (15001, 15006, 15008, 15053);
                let mut rest = p;
                (rest.n_uids, rest.n_gids) = (0, 0);
                for (uid, gid, place, (dst, on_lo, loopback_dst), tcp, dport) in cases(&dsts) {
                    let c = Conn {
                        family: AF_INET,
                        tcp,
                        dst: [dst, 0, 0, 0],
                        dport,
                        uid,
                        gid,
                        passthrough_src: false,
                        bound: false,
                        in_proxy_cgroup: place,
                        tproxy_marked: false,
                    };
                    let want = triplets(&p, &c, on_lo, loopback_dst)
                        .unwrap_or_else(|| decide(&rest, &c, &NO_INBOUND));
                    assert_eq!(decide(&p, &c, &NO_INBOUND), want, "{p:?} {c:?}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500_000, "{checked}");
}

type Case = (u32, u32, bool, (u32, bool, bool), bool, u16);

fn cases(dsts: &[(u32, bool, bool); 4]) -> impl Iterator<Item = Case> + '_ {
    [1u32, 2, 3, 9].into_iter().flat_map(move |uid| {
        [1u32, 2, 3, 9].into_iter().flat_map(move |gid| {
            [false, true].into_iter().flat_map(move |place| {
                dsts.iter().flat_map(move |d| {
                    [false, true].into_iter().flat_map(move |tcp| {
                        [53u16, 80, 15008]
                            .into_iter()
                            .map(move |port| (uid, gid, place, *d, tcp, port))
                    })
                })
            })
        })
    })
}
