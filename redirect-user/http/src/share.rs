//! Each peer's share of an endpoint's connections: one address holding open connections that
//! never send their request (any pod can reach the daemon's metrics port on the node's IP)
//! gets at most its share, and the rest stays for the others (Prometheus, the kubelet's
//! probes).
use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{Arc, Mutex, PoisonError},
};

/// The connections each peer address holds.
#[derive(Debug)]
pub(crate) struct Shares {
    per_peer: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's part of its peer's share, given back on drop.
#[derive(Debug)]
pub(crate) struct Held {
    shares: Arc<Shares>,
    peer: IpAddr,
}

impl Shares {
    /// Shares of `per_peer` connections each.
    pub(crate) fn new(per_peer: usize) -> Arc<Self> {
        Arc::new(Self {
            per_peer,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// One more connection of `peer` (an IPv4-mapped address counts as its IPv4 one), unless
    /// it holds its whole share already.
    pub(crate) fn take(self: &Arc<Self>, peer: IpAddr) -> Option<Held> {
        let peer = peer.to_canonical();
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(peer).or_default();
        if *n >= self.per_peer {
            return None;
        }
        *n += 1;
        Some(Held {
            shares: Arc::clone(self),
            peer,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = self
            .shares
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.peer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_its_share_and_gets_it_back_as_connections_end() {
        let shares = Shares::new(2);
        let a: IpAddr = "10.0.0.1".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        let b: IpAddr = "10.0.0.2".parse().expect("ip");
        let first = shares.take(a).expect("first");
        let _second = shares.take(mapped).expect("second, the same peer mapped");
        assert!(shares.take(a).is_none(), "a third of the same peer");
        assert!(shares.take(b).is_some(), "another peer");
        drop(first);
        assert!(shares.take(a).is_some(), "one given back");
    }
}
