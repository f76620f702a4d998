//! Policies an older build wrote, completed after an in-place upgrade with what this build
//! derives from them, so an upgraded node captures as a freshly applied one does without
//! waiting for each policy's next apply: a TPROXY namespace's outbound policy gains
//! `OUT_TPROXY` (layout v6: Istio's mark-1338 step), read from its inbound policy's
//! `INBOUND_TPROXY`, which every layout since v3 has written.
use std::path::Path;

use redirect_common::{
    map_names,
    outbound::{OutboundPolicy, OUT_TPROXY},
    InboundPolicy, NetnsCookie, INBOUND_TPROXY,
};

use crate::{
    error::Result,
    maps::store::{hash, map_error},
    node::NodeDatapath,
};

/// Completes the policies pinned at `dir` (the caller holds the node lock, so no apply runs
/// beside it); returns how many changed.
pub(super) fn complete(dir: &Path) -> Result<usize> {
    let mut dp = NodeDatapath::open(dir)?;
    let store = dp.maps();
    let tproxy: Vec<NetnsCookie> =
        hash::<NetnsCookie, InboundPolicy>(store, map_names::NETNS_INBOUND)?
            .iter()
            .filter_map(std::result::Result::ok)
            .filter(|(_, p)| p.flags & INBOUND_TPROXY != 0)
            .map(|(cookie, _)| cookie)
            .collect();
    let mut outbound = hash::<NetnsCookie, OutboundPolicy>(store, map_names::NETNS_OUTBOUND)?;
    let mut changed = 0;
    for cookie in tproxy {
        let Ok(mut policy) = outbound.get(&cookie, 0) else {
            continue;
        };
        if policy.flags & OUT_TPROXY != 0 {
            continue;
        }
        policy.flags |= OUT_TPROXY;
        outbound.insert(cookie, policy, 0).map_err(map_error(
            "completing a TPROXY policy in",
            map_names::NETNS_OUTBOUND,
        ))?;
        changed += 1;
    }
    Ok(changed)
}
