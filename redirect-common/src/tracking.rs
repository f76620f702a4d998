//! Who owns a `TRACKED` / `INBOUND` entry, and so which socket's close deletes it.
//!
//! A `TRACKED` entry is created by the application's connecting socket (`client_cookie`); an
//! `INBOUND` entry by sk_lookup (no client cookie). The proxy's accepted socket claims either
//! when its handshake completes (`proxy_cookie`) and from then on owns it: the application may
//! close first (connect, send, close) and the proxy may read `SO_ORIGINAL_DST` only after that.
//! Unclaimed, a `TRACKED` entry belongs to the application's socket. `PENDING[cookie]` always
//! goes with its own socket. sock_ops applies these rules; they are tested here without a kernel.
use crate::Tracked;

/// Under which of its two keys the closing socket found the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundAs {
    /// Its local end as the client (the application's connecting socket).
    Client,
    /// Its remote end as the client (the proxy's accepted socket).
    Proxy,
}

/// What a closing socket does with an entry found under one of its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnClose {
    /// The socket owns the entry: delete it.
    Delete,
    /// Another socket owns it (or nobody yet): keep it and look further.
    Keep,
}

/// The proxy's accepted socket `sock` claims `entry`: its close deletes it from now on.
#[inline(always)]
pub fn claim(entry: &mut Tracked, sock: u64) {
    entry.proxy_cookie = sock;
}

/// The rule for socket `sock` closing while `entry` exists under its key `found`.
#[inline(always)]
pub fn on_close(sock: u64, found: FoundAs, entry: &Tracked) -> OnClose {
    let owns = match found {
        // The application's socket owns its entry until the proxy claimed it.
        FoundAs::Client => entry.client_cookie == sock && entry.proxy_cookie == 0,
        // The proxy's socket owns what it claimed.
        FoundAs::Proxy => entry.proxy_cookie == sock,
    };
    if owns {
        OnClose::Delete
    } else {
        OnClose::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OrigDst;

    const APP: u64 = 11;
    const PROXY: u64 = 22;
    const OTHER: u64 = 33;

    fn entry(client_cookie: u64, proxy_cookie: u64) -> Tracked {
        Tracked {
            dst: OrigDst {
                addr: [1, 0, 0, 0],
                port: crate::PortBe::from_host(80),
                family: crate::AF_INET,
                _pad: 0,
            },
            client_cookie,
            proxy_cookie,
        }
    }

    #[test]
    fn unclaimed_tracked_entry_goes_with_the_application_socket() {
        let e = entry(APP, 0);
        assert_eq!(on_close(APP, FoundAs::Client, &e), OnClose::Delete);
        assert_eq!(on_close(OTHER, FoundAs::Client, &e), OnClose::Keep);
        // Found under the mirrored key, an unclaimed entry is nobody's to delete.
        assert_eq!(on_close(APP, FoundAs::Proxy, &e), OnClose::Keep);
        assert_eq!(on_close(OTHER, FoundAs::Proxy, &e), OnClose::Keep);
    }

    #[test]
    fn claimed_entry_outlives_the_application_and_goes_with_the_proxy_socket() {
        let mut e = entry(APP, 0);
        claim(&mut e, PROXY);
        assert_eq!(e.proxy_cookie, PROXY);
        assert_eq!(e.client_cookie, APP);
        // The application closes first: the proxy may still ask for SO_ORIGINAL_DST.
        assert_eq!(on_close(APP, FoundAs::Client, &e), OnClose::Keep);
        assert_eq!(on_close(OTHER, FoundAs::Proxy, &e), OnClose::Keep);
        assert_eq!(on_close(PROXY, FoundAs::Proxy, &e), OnClose::Delete);
    }

    #[test]
    fn inbound_entry_belongs_only_to_the_proxy_socket_that_claimed_it() {
        // sk_lookup writes no client cookie.
        let mut e = entry(0, 0);
        assert_eq!(on_close(PROXY, FoundAs::Proxy, &e), OnClose::Keep);
        assert_eq!(on_close(PROXY, FoundAs::Client, &e), OnClose::Keep);
        claim(&mut e, PROXY);
        assert_eq!(on_close(OTHER, FoundAs::Proxy, &e), OnClose::Keep);
        assert_eq!(on_close(PROXY, FoundAs::Client, &e), OnClose::Keep);
        assert_eq!(on_close(PROXY, FoundAs::Proxy, &e), OnClose::Delete);
    }

    #[test]
    fn a_second_claim_moves_ownership() {
        // PASSIVE_ESTABLISHED overwrites: the last accepted socket with this 4-tuple owns it.
        let mut e = entry(APP, PROXY);
        claim(&mut e, OTHER);
        assert_eq!(on_close(PROXY, FoundAs::Proxy, &e), OnClose::Keep);
        assert_eq!(on_close(OTHER, FoundAs::Proxy, &e), OnClose::Delete);
    }
}
