//! The hand-off of a redirected connection's original destination from the application's
//! socket to the proxy's accepted socket, where `SO_ORIGINAL_DST` is read.
//!
//! The two sockets share nothing but the connection's 4-tuple, so the hand-off needs a keyed
//! map: `TRACKED` (netns + 4-tuple), written by the application's socket at `tcp_connect()`,
//! or `INBOUND`, written by sk_lookup. The proxy's accepted socket claims the entry when its
//! handshake completes: it copies the destination into its own socket storage and deletes the
//! entry at once. An entry nobody claims (the proxy never completed the handshake) goes when
//! the application's socket closes (`TRACKED`) or by LRU eviction (`INBOUND`, a SYN that never
//! completed). Each policy may have at most its quota of `TRACKED` entries at once (counted in
//! `HANDOFFS`), so one pod holding connections cannot fill the map for the others.
//! sock_ops applies these rules; they are tested here without a kernel.
use crate::Tracked;

/// Whether a new hand-off may be written once the policy's count, this one included, is
/// `count_after`. The count is kept as wrapping u64 adds of +1 and -1; a policy re-created
/// while its old sockets still close may briefly count below zero, read here as signed so that
/// it never locks the namespace out.
#[inline(always)]
pub fn admit(count_after: u64, quota: u64) -> bool {
    (count_after as i64) <= quota as i64
}

/// Whether the closing application socket `sock` owns `entry`, found under its client key:
/// an entry still there is unclaimed, but the 4-tuple may already belong to a newer socket.
#[inline(always)]
pub fn app_close_deletes(sock: u64, entry: &Tracked) -> bool {
    entry.client_cookie == sock
}

/// Whether a socket that connected to `remote` may hold a `LOCAL_CONNECTS` record, to be
/// deleted when it leaves `SYN_SENT`. Only a connect to one of its namespace's own addresses
/// (`POD_ADDRS`) is recorded, and that map never holds a loopback or unspecified address (user
/// space leaves them out of a namespace's addresses), so a connect to loopback has none: every
/// redirected connect (to the proxy on `127.0.0.1` / `::1`) leaves `SYN_SENT` without a map
/// lookup.
#[inline(always)]
pub fn may_hold_local_record(family: u16, remote: &[u32; 4]) -> bool {
    !crate::outbound::is_loopback(family, remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OrigDst;

    #[test]
    fn a_connect_to_loopback_holds_no_local_record() {
        let v4 = |a: [u8; 4]| [u32::from_ne_bytes(a), 0, 0, 0];
        assert!(!may_hold_local_record(crate::AF_INET, &v4([127, 0, 0, 1])));
        assert!(!may_hold_local_record(crate::AF_INET, &v4([127, 0, 0, 6])));
        assert!(!may_hold_local_record(
            crate::AF_INET6,
            &[0, 0, 0, u32::from_be(1)]
        ));
        assert!(may_hold_local_record(crate::AF_INET, &v4([10, 1, 2, 3])));
        // `::6` is not in POD_ADDRS either, but its delete is only a miss.
        assert!(may_hold_local_record(
            crate::AF_INET6,
            &[0, 0, 0, u32::from_be(6)]
        ));
        assert!(may_hold_local_record(
            crate::AF_INET6,
            &[u32::from_be(0xfd00_0000), 0, 0, u32::from_be(1)]
        ));
    }

    fn entry(client_cookie: u64) -> Tracked {
        Tracked {
            dst: OrigDst {
                addr: [1, 0, 0, 0],
                port: crate::PortBe::from_host(80),
                family: crate::AF_INET,
                _pad: 0,
            },
            client_cookie,
            quota_key: 0,
        }
    }

    #[test]
    fn the_quota_admits_up_to_its_value() {
        assert!(admit(1, 2));
        assert!(admit(2, 2));
        assert!(!admit(3, 2));
        assert!(!admit(1, 0), "a zero quota admits nothing");
    }

    #[test]
    fn a_count_below_zero_never_locks_the_namespace_out() {
        // Two old sockets closed after the policy's counter was re-created at zero.
        let count = 0u64.wrapping_sub(2).wrapping_add(1);
        assert!(admit(count, 2));
    }

    #[test]
    fn an_unclaimed_entry_goes_only_with_the_socket_that_wrote_it() {
        let e = entry(11);
        assert!(app_close_deletes(11, &e));
        assert!(
            !app_close_deletes(33, &e),
            "a newer socket's entry on the same 4-tuple"
        );
    }
}
