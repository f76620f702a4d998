//! A namespace's routes with the interface each leaves through, for istio-iptables `-c`
//! (`OUTPUT -o NIC -j RETURN`): read from `/proc/thread-self/net/{route,ipv6_route}` inside it.
use std::{
    net::{Ipv4Addr, Ipv6Addr},
    path::Path,
};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::{error::Result, netns};

/// Parses `/proc/net/route` (IPv4 main table): (prefix, interface).
pub fn parse_v4(text: &str) -> Vec<(IpNet, String)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 {
            continue;
        }
        let (Ok(dst), Ok(mask)) = (u32::from_str_radix(f[1], 16), u32::from_str_radix(f[7], 16))
        else {
            continue;
        };
        // The file prints the in-memory (network order) word in hex on a little-endian host.
        let dst = Ipv4Addr::from(dst.to_ne_bytes());
        let bits = mask.count_ones() as u8;
        if let Ok(net) = Ipv4Net::new(dst, bits) {
            out.push((IpNet::V4(net), f[0].to_owned()));
        }
    }
    out
}

/// Parses `/proc/net/ipv6_route` (all tables; `lo` routes are the local ones): (prefix, interface).
pub fn parse_v6(text: &str) -> Vec<(IpNet, String)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[0].len() != 32 {
            continue;
        }
        let (Ok(dst), Ok(bits)) = (u128::from_str_radix(f[0], 16), u8::from_str_radix(f[1], 16))
        else {
            continue;
        };
        if let Ok(net) = Ipv6Net::new(Ipv6Addr::from(dst), bits) {
            out.push((IpNet::V6(net), f[9].to_owned()));
        }
    }
    out
}

/// Every route of the namespace with whether it leaves through one of `excluded`.
pub fn via_interfaces(netns_path: &Path, excluded: &[String]) -> Result<Vec<(IpNet, bool)>> {
    let (v4, v6) = netns::in_netns(netns_path, || {
        let v4 = std::fs::read_to_string("/proc/thread-self/net/route")?;
        let v6 = std::fs::read_to_string("/proc/thread-self/net/ipv6_route").unwrap_or_default();
        Ok((v4, v6))
    })?;
    let mut out: Vec<(IpNet, bool)> = Vec::new();
    for (net, dev) in parse_v4(&v4).into_iter().chain(parse_v6(&v6)) {
        let via = excluded.contains(&dev);
        if let Some(e) = out.iter_mut().find(|(n, _)| *n == net) {
            e.1 |= via;
        } else {
            out.push((net, via));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_route() {
        let text =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t010012C6\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
nic1\t000012C6\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let r = parse_v4(text);
        assert_eq!(r[0], ("0.0.0.0/0".parse().expect("net"), "eth0".into()));
        assert_eq!(r[1], ("198.18.0.0/24".parse().expect("net"), "nic1".into()));
    }

    #[test]
    fn parses_proc_ipv6_route() {
        let text = "20010db8000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     nic1\n";
        let r = parse_v6(text);
        assert_eq!(r[0], ("2001:db8::/32".parse().expect("net"), "nic1".into()));
    }
}
