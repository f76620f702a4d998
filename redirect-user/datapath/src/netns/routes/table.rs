//! The kernel's route choice as `-c` needs it: which prefixes of a namespace's routing tables
//! leave through an excluded interface, resolved per prefix so that the BPF side's longest
//! match on `OUT_ROUTES` gives the answer of the kernel's own lookup.
//!
//! The kernel, with the default rules, looks up the `local` table, then `main` (then
//! `default`): in the first table with a match, the longest prefix wins, then the lowest metric;
//! a multipath route may leave by any of its nexthops. Each prefix of `local` and `main`
//! becomes one entry valued with that choice for the addresses it is the longest entry for,
//! so a better non-excluded route shadows an excluded one. Anything the trie cannot express
//! (policy routing, other tables, source or TOS routes) turns the family's `-c` off: capture.
use std::collections::{BTreeSet, HashMap};

use ipnet::IpNet;

/// Table id of `local` (looked up first by the default rules).
pub(crate) const TABLE_LOCAL: u32 = 255;
/// Table id of `main`.
pub(crate) const TABLE_MAIN: u32 = 254;

/// One route as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Route {
    /// Routing table id.
    pub(crate) table: u32,
    /// Destination prefix (host bits cleared).
    pub(crate) prefix: IpNet,
    /// Metric (`RTA_PRIORITY`; lower wins).
    pub(crate) metric: u32,
    /// Interfaces (ifindex) traffic may leave by: one, every nexthop of a multipath route, the
    /// loopback for local delivery; none for unreachable, blackhole, prohibit and throw.
    pub(crate) devices: Vec<u32>,
    /// The route applies to some traffic only (a source prefix or a TOS): the trie, keyed by
    /// destination alone, cannot express it.
    pub(crate) selective: bool,
}

/// A namespace's routes with what its rules say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tables {
    /// Every route of every table, in the kernel's dump order.
    pub(crate) routes: Vec<Route>,
    /// IPv4 has rules other than the default `local`, `main`, `default` lookups.
    pub(crate) policy_rules_v4: bool,
    /// IPv6 has rules other than the default `local`, `main` lookups.
    pub(crate) policy_rules_v6: bool,
    /// The namespace held more routes than were read: none can be trusted to be the
    /// kernel's choice (a more specific route may be among those left out).
    pub(crate) left_out: bool,
}

/// The `OUT_ROUTES` entries of a namespace and why a family was left captured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub struct Resolved {
    /// Prefix -> whether its addresses leave through an excluded interface, sorted.
    pub entries: Vec<(IpNet, bool)>,
    /// For each family whose routes could not be emulated: why (its traffic is captured).
    pub doubts: Vec<String>,
}

/// Resolves `tables` for the interfaces `excluded` (ifindexes).
pub(crate) fn resolve(tables: &Tables, excluded: &[u32]) -> Resolved {
    let mut out = Resolved::default();
    for (v4, policy_rules, name) in [
        (true, tables.policy_rules_v4, "IPv4"),
        (false, tables.policy_rules_v6, "IPv6"),
    ] {
        let routes: Vec<&Route> = tables
            .routes
            .iter()
            .filter(|r| matches!(r.prefix, IpNet::V4(_)) == v4)
            .collect();
        let via_excluded = |r: &Route| r.devices.iter().any(|d| excluded.contains(d));
        if !routes.iter().any(|r| via_excluded(r)) {
            continue; // nothing leaves through an excluded interface: no entry needed
        }
        if tables.left_out {
            out.doubts.push(format!(
                "{name}: more routes than the daemon reads for one namespace (its quotas x 4)"
            ));
            continue;
        }
        if let Some(why) = doubt(&routes, policy_rules, via_excluded) {
            out.doubts.push(format!("{name}: {why}"));
            continue;
        }
        out.entries.extend(choose(&routes, v4, excluded));
    }
    out.entries.sort();
    out
}

/// Why the family's routes cannot be emulated by a destination trie, if they cannot.
fn doubt(
    routes: &[&Route],
    policy_rules: bool,
    via_excluded: impl Fn(&Route) -> bool,
) -> Option<String> {
    if policy_rules {
        return Some("ip rules other than the default lookups (policy routing)".into());
    }
    if let Some(r) = routes
        .iter()
        .find(|r| r.table != TABLE_LOCAL && r.table != TABLE_MAIN && via_excluded(r))
    {
        return Some(format!(
            "route {} in table {} via an excluded interface",
            r.prefix, r.table
        ));
    }
    if let Some(r) = routes
        .iter()
        .find(|r| r.selective && (r.table == TABLE_LOCAL || r.table == TABLE_MAIN))
    {
        return Some(format!(
            "route {} depends on the source or TOS (table {})",
            r.prefix, r.table
        ));
    }
    None
}

/// One entry per prefix of `local` and `main`, valued with the kernel's choice, then pruned to
/// the excluded entries and the non-excluded ones that shadow an excluded one.
fn choose(routes: &[&Route], v4: bool, excluded: &[u32]) -> Vec<(IpNet, bool)> {
    let mut by_prefix: HashMap<(u32, IpNet), Vec<&Route>> = HashMap::new();
    let mut prefixes = BTreeSet::new();
    for r in routes
        .iter()
        .filter(|r| r.table == TABLE_LOCAL || r.table == TABLE_MAIN)
    {
        by_prefix.entry((r.table, r.prefix)).or_default().push(r);
        prefixes.insert(r.prefix);
    }
    let all: Vec<(IpNet, bool)> = prefixes
        .into_iter()
        .map(|p| (p, winner_excluded(&by_prefix, p, v4, excluded)))
        .collect();
    let excluded_nets: Vec<IpNet> = all.iter().filter(|(_, x)| *x).map(|(n, _)| *n).collect();
    all.into_iter()
        .filter(|(net, x)| {
            *x || excluded_nets
                .iter()
                .any(|e| e.prefix_len() < net.prefix_len() && e.contains(net))
        })
        .collect()
}

/// Whether the route the kernel picks for the addresses `p` is the longest entry for leaves
/// through an excluded interface: the first table with a route covering `p`, its longest
/// covering prefix, the lowest metric there.
fn winner_excluded(
    by_prefix: &HashMap<(u32, IpNet), Vec<&Route>>,
    p: IpNet,
    v4: bool,
    excluded: &[u32],
) -> bool {
    for table in [TABLE_LOCAL, TABLE_MAIN] {
        for len in (0..=p.prefix_len()).rev() {
            let Ok(q) = IpNet::new(p.network(), len).map(|n| n.trunc()) else {
                continue;
            };
            if let Some(candidates) = by_prefix.get(&(table, q)) {
                return best_excluded(candidates, v4, excluded);
            }
        }
    }
    false
}

/// Among the routes of one prefix: the lowest metric wins. IPv4 takes the first of equal
/// metrics (the kernel's list order, which its dump keeps); IPv6 may pick any of them
/// (multipath siblings, or its round-robin among equals), so all must be excluded.
fn best_excluded(candidates: &[&Route], v4: bool, excluded: &[u32]) -> bool {
    let Some(metric) = candidates.iter().map(|r| r.metric).min() else {
        return false;
    };
    let mut best = candidates.iter().filter(|r| r.metric == metric);
    if v4 {
        best.next().is_some_and(|r| leaves_excluded(r, excluded))
    } else {
        best.all(|r| leaves_excluded(r, excluded))
    }
}

/// The route leaves only through excluded interfaces (a multipath route: every nexthop).
fn leaves_excluded(r: &Route, excluded: &[u32]) -> bool {
    !r.devices.is_empty() && r.devices.iter().all(|d| excluded.contains(d))
}
