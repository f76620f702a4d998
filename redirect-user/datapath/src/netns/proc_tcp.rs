//! The fallback when the kernel's socket diagnostics cannot answer (`NETLINK_SOCK_DIAG`
//! without `inet_diag`/`tcp_diag`, e.g. modules a guest cannot load): the LISTEN sockets of
//! `/proc/thread-self/net/tcp{,6}` (slower: the kernel walks its whole established table).
use crate::netns::sockdiag::Listening;

/// Parses `/proc/net/tcp{,6}` text: sockets in LISTEN state (0A) on `port`.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn parse_listeners(text: &str, port: u16, ipv6: bool) -> Vec<Listening> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit(':').next()?;
            let state = f.get(3)?;
            let inode: u64 = f.get(9)?.parse().ok()?;
            (u16::from_str_radix(local_port, 16).ok()? == port && *state == "0A" && inode != 0)
                .then_some(Listening { inode, ipv6 })
        })
        .collect()
}

/// This thread's namespace's TCP listeners on `port`, from `/proc/thread-self/net/tcp{,6}`.
pub(crate) fn listening(port: u16) -> Vec<Listening> {
    let mut out = Vec::new();
    for (path, ipv6) in [
        ("/proc/thread-self/net/tcp", false),
        ("/proc/thread-self/net/tcp6", true),
    ] {
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(parse_listeners(&text, port, ipv6));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:3A9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 41234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:3A99 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1337        0 41233 1 0000000000000000 100 0 0 10 0
   2: 0100007F:3A9E 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 41240 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn finds_only_listeners_on_the_port() {
        // 0x3A9E = 15006, 0x3A99 = 15001.
        assert_eq!(
            parse_listeners(TCP, 15006, false),
            [Listening {
                inode: 41234,
                ipv6: false
            }]
        );
        assert_eq!(
            parse_listeners(TCP, 15001, true),
            [Listening {
                inode: 41233,
                ipv6: true
            }]
        );
        assert!(parse_listeners(TCP, 8080, false).is_empty());
        assert!(parse_listeners("", 15006, false).is_empty());
    }
}
