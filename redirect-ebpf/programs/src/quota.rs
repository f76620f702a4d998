//! Per-key entry counts held to a quota (`HANDOFFS` per policy, `LOCAL_COUNTS` per
//! namespace): sock_ops counts an entry before it inserts it and back when the delete wins.
use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{bindings::BPF_NOEXIST, maps::HashMap};
use redirect_common::tracking;

use crate::maps::handoff_quota;

/// Counts one more entry for `key` in `counts` (`HANDOFFS` or `LOCAL_COUNTS`); false (and
/// nothing counted) when over the quota.
#[inline(always)]
pub(crate) fn quota_add(counts: &HashMap<u64, u64>, key: u64) -> bool {
    let slot = match counts.get_ptr_mut(key) {
        Some(n) => n,
        None => {
            // The key's first entry; a concurrent first insert makes this one fail.
            let _ = counts.insert(key, 0, u64::from(BPF_NOEXIST));
            match counts.get_ptr_mut(key) {
                Some(n) => n,
                None => return false,
            }
        }
    };
    // SAFETY: a map value valid for the program run, changed only by atomic adds (as in
    // `readiness`); the read after the add may see other CPUs' adds too, so a policy can go
    // over its quota by at most the number of CPUs adding at that instant.
    let after = unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, 1);
        core::ptr::read_volatile(slot)
    };
    if tracking::admit(after, handoff_quota()) {
        return true;
    }
    // SAFETY: as above.
    unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, u64::MAX) };
    false
}

/// Counts one entry of `key` less in `counts` (its entry was deleted).
#[inline(always)]
pub(crate) fn quota_sub(counts: &HashMap<u64, u64>, key: u64) {
    if let Some(slot) = counts.get_ptr_mut(key) {
        // SAFETY: as in `quota_add`.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(slot, u64::MAX) };
    }
}
