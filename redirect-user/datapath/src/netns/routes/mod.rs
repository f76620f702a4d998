//! A namespace's routes for istio-iptables `-c` (`OUTPUT -o NIC -j RETURN`): read over
//! rtnetlink inside it (`netlink`) and resolved per prefix as the kernel's lookup chooses
//! (`table`), into the `OUT_ROUTES` entries the BPF side matches longest-prefix first.
mod netlink;
pub(crate) mod table;
#[cfg(test)]
mod tests;

use std::path::Path;

use ipnet::IpNet;

use self::table::Resolved;
use crate::{error::Result, netns::NetnsHandle};

/// Reads the namespace's routes and rules over its rtnetlink socket (no thread enters it) and
/// resolves them for the interfaces `excluded` (names; one the namespace does not have
/// excludes nothing).
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn resolve_in(ns: &NetnsHandle, excluded: &[String], cap: usize) -> Result<Resolved> {
    let mut names: Vec<&str> = excluded.iter().map(String::as_str).collect();
    names.push("lo");
    ns.with_route_socket(|socket| {
        let mut indexes = socket.indexes(&names)?;
        let lo = indexes.pop().flatten().unwrap_or(1);
        let excluded: Vec<u32> = indexes.into_iter().flatten().collect();
        if excluded.is_empty() {
            return Ok(Resolved::default());
        }
        let tables = netlink::read(socket, lo, cap)?;
        Ok(table::resolve(&tables, &excluded))
    })
}

/// The namespace's `OUT_ROUTES` entries (prefix, leaves through an excluded interface); a
/// family whose routes cannot be emulated gets none (captured) and a warning.
pub(crate) fn via_interfaces(
    ns: &NetnsHandle,
    excluded: &[String],
    cap: usize,
) -> Result<Vec<(IpNet, bool)>> {
    let resolved = resolve_in(ns, excluded, cap)?;
    warn_doubts(ns.path(), &resolved);
    Ok(resolved.entries)
}

/// Logs each family `resolved` left captured, with the reason.
pub(crate) fn warn_doubts(netns_path: &Path, resolved: &Resolved) {
    for reason in &resolved.doubts {
        tracing::warn!(
            netns = %netns_path.display(),
            reason = %reason,
            "-c (excluded interfaces): the kernel's route choice cannot be emulated; this family's traffic is captured"
        );
    }
}
