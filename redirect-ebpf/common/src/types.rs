//! Newtypes for the roles of plain integers at the kernel boundary, and the constants both
//! sides share: a netns cookie is not a socket cookie, a network-order port is not a host-order one.

/// A network namespace's cookie (`bpf_get_netns_cookie`, `SO_NETNS_COOKIE`), the key that keeps
/// identical addresses and ports of different pods apart in node-global maps.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(transparent)
)]
pub struct NetnsCookie(pub u64);

impl core::fmt::Display for NetnsCookie {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(&self.0, f)
    }
}

impl core::str::FromStr for NetnsCookie {
    type Err = core::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse().map(Self)
    }
}

impl NetnsCookie {
    /// The key of the default entry (`attach`'s policy, for every namespace without its own).
    pub const DEFAULT: Self = Self(0);

    /// The raw value.
    #[inline(always)]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for NetnsCookie {
    #[inline(always)]
    fn from(v: u64) -> Self {
        Self(v)
    }
}

impl From<NetnsCookie> for u64 {
    #[inline(always)]
    fn from(c: NetnsCookie) -> Self {
        c.0
    }
}

impl PartialEq<NetnsCookie> for u64 {
    #[inline(always)]
    fn eq(&self, other: &NetnsCookie) -> bool {
        *self == other.0
    }
}

impl PartialEq<u64> for NetnsCookie {
    #[inline(always)]
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

/// A port in network byte order, as `bpf_sock_addr.user_port` and `sockaddr_in.sin_port` hold it.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PortBe(u16);

impl PortBe {
    /// From a host-order port.
    #[inline(always)]
    pub const fn from_host(port: u16) -> Self {
        Self(port.to_be())
    }

    /// From a value already in network order (read from a kernel structure).
    #[inline(always)]
    pub const fn from_raw(raw: u16) -> Self {
        Self(raw)
    }

    /// The host-order port.
    #[inline(always)]
    pub const fn host(self) -> u16 {
        u16::from_be(self.0)
    }

    /// The network-order value, as the kernel structure wants it.
    #[inline(always)]
    pub const fn raw(self) -> u16 {
        self.0
    }
}

/// Network-order words of an address, as the maps hold it (IPv4 in word 0).
pub fn addr_words(ip: core::net::IpAddr) -> [u32; 4] {
    match ip {
        core::net::IpAddr::V4(v4) => [u32::from_ne_bytes(v4.octets()), 0, 0, 0],
        core::net::IpAddr::V6(v6) => {
            let o = v6.octets();
            let w = |i: usize| u32::from_ne_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

/// The family and words of an address the way the hooks see a destination: a v4-mapped
/// IPv6 address (`::ffff:a.b.c.d`) is IPv4.
pub fn family_words(ip: core::net::IpAddr) -> (u16, [u32; 4]) {
    match ip {
        core::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => (crate::AF_INET, addr_words(core::net::IpAddr::V4(v4))),
            None => (crate::AF_INET6, addr_words(ip)),
        },
        core::net::IpAddr::V4(_) => (crate::AF_INET, addr_words(ip)),
    }
}

/// The address of network-order words (IPv4 in word 0 for `AF_INET`).
pub fn addr_of(family: u16, w: [u32; 4]) -> core::net::IpAddr {
    if family == crate::AF_INET {
        core::net::IpAddr::from(w[0].to_ne_bytes())
    } else {
        let mut o = [0u8; 16];
        for (i, word) in w.iter().enumerate() {
            o[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
        }
        core::net::IpAddr::from(o)
    }
}

/// `IPPROTO_TCP`.
pub const IPPROTO_TCP: u32 = 6;
/// 127.0.0.6 in network order: Istio's inbound passthrough source.
pub const PASSTHROUGH_V4: u32 = u32::from_ne_bytes([127, 0, 0, 6]);
/// ::6 in network order.
pub const PASSTHROUGH_V6: [u32; 4] = [0, 0, 0, u32::from_ne_bytes([0, 0, 0, 6])];
/// ::1 in network order.
pub const LOOPBACK_V6: [u32; 4] = [0, 0, 0, u32::from_ne_bytes([0, 0, 0, 1])];
/// Word 2 of a v4-mapped address (`::ffff:a.b.c.d`) in network order.
pub const V4_MAPPED_WORD: u32 = u32::from_ne_bytes([0, 0, 0xff, 0xff]);

const _: () = assert!(core::mem::size_of::<NetnsCookie>() == 8);
const _: () = assert!(core::mem::size_of::<PortBe>() == 2);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_keep_their_order() {
        let p = PortBe::from_host(15001);
        assert_eq!(p.host(), 15001);
        assert_eq!(p.raw().to_ne_bytes(), 15001u16.to_be_bytes());
        assert_eq!(PortBe::from_raw(p.raw()), p);
    }

    #[test]
    fn constants_are_network_order() {
        assert_eq!(PASSTHROUGH_V4.to_ne_bytes(), [127, 0, 0, 6]);
        assert_eq!(V4_MAPPED_WORD, u32::from_be(0x0000_ffff));
        assert_eq!(LOOPBACK_V6[3].to_ne_bytes(), [0, 0, 0, 1]);
        assert_eq!(NetnsCookie(7), 7u64);
    }

    #[test]
    fn addresses_round_trip_and_fold_v4_mapped() {
        let v4: core::net::IpAddr = core::net::Ipv4Addr::new(198, 18, 0, 1).into();
        assert_eq!(addr_words(v4)[0].to_ne_bytes(), [198, 18, 0, 1]);
        assert_eq!(addr_of(crate::AF_INET, addr_words(v4)), v4);
        let mapped: core::net::IpAddr = core::net::Ipv4Addr::new(198, 18, 0, 1)
            .to_ipv6_mapped()
            .into();
        assert_eq!(family_words(mapped), (crate::AF_INET, addr_words(v4)));
        let v6: core::net::IpAddr =
            core::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into();
        assert_eq!(family_words(v6).0, crate::AF_INET6);
        assert_eq!(addr_of(crate::AF_INET6, addr_words(v6)), v6);
    }
}
