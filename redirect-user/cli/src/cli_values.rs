//! Value parsers of the `redirect` command line: each error says what is wrong with the value
//! and what would be right (clap prefixes the flag).
use std::ffi::OsString;
use std::path::PathBuf;

/// Parses a TCP port, 1..=65535.
pub(crate) fn parse_port(s: &str) -> Result<u16, String> {
    let n: u64 = s.trim().parse().map_err(|_| {
        format!("'{s}' is not a port number: use a number from 1 to 65535, e.g. 15001")
    })?;
    match u16::try_from(n) {
        Ok(0) => Err(format!(
            "'{s}' is port 0, which cannot be connected to: use a number from 1 to 65535, e.g. 15001"
        )),
        Ok(p) => Ok(p),
        Err(_) => Err(format!(
            "'{s}' is port {n}, above 65535: use a number from 1 to 65535, e.g. 15001"
        )),
    }
}

/// Parses an IPv4 CIDR (a bare address is a /32).
pub(crate) fn parse_cidr(s: &str) -> Result<ipnet::Ipv4Net, String> {
    let s = s.trim();
    s.parse::<ipnet::Ipv4Net>()
        .or_else(|_| s.parse::<std::net::Ipv4Addr>().map(ipnet::Ipv4Net::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("'{s}' is not an IPv4 CIDR such as 10.96.0.0/12"))
}

/// Parses an `--inbound` spec.
pub(crate) fn parse_inbound(s: &str) -> Result<redirect_policy::InboundSpec, String> {
    let spec: redirect_policy::InboundSpec = s.parse()?;
    if !spec.netns.exists() {
        return Err(format!(
            "network namespace {} does not exist (`ip netns list` shows the names; a path such as \
                /proc/PID/ns/net works too)",
            spec.netns.display()
        ));
    }
    Ok(spec)
}

/// Parses an aya-log level name into its number.
pub(crate) fn parse_bpf_log(s: &str) -> Result<u8, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" => Ok(0),
        "error" => Ok(1),
        "warn" => Ok(2),
        "info" => Ok(3),
        "debug" => Ok(4),
        "trace" => Ok(5),
        _ => Err(format!(
            "'{s}' is not a log level: use off, error, warn, info, debug or trace"
        )),
    }
}

/// Parses a numeric uid or gid.
pub(crate) fn parse_id(s: &str) -> Result<u32, String> {
    s.trim().parse().map_err(|_| {
        format!("'{s}' is not a numeric id: give the number (e.g. 1337); for a user name, look it up with `id -u {s}`")
    })
}

/// Parses a cgroup v2 directory (`--cgroup`, `--proxy-cgroup`): it must exist on the cgroup v2
/// mount, which the hint names.
pub(crate) fn parse_cgroup(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    redirect_datapath::validate_cgroup(&path)
        .map(|_| path)
        .map_err(|e| e.to_string())
}

/// `--attach-scope`: `root` or `per-pod`.
pub(crate) fn parse_scope(s: &str) -> Result<redirect_datapath::AttachScope, String> {
    match s {
        "root" => Ok(redirect_datapath::AttachScope::Root),
        "per-pod" => Ok(redirect_datapath::AttachScope::PerPod),
        _ => Err(format!(
            "'{s}' is not an attach scope: give root or per-pod"
        )),
    }
}

/// Names the argument clap refused as not UTF-8 (clap's own message names none): its position,
/// its bytes shown lossily, and the flag it is the value of.
pub(crate) fn non_utf8_argument(args: impl IntoIterator<Item = OsString>) -> String {
    let args: Vec<OsString> = args.into_iter().collect();
    let Some(i) = args.iter().position(|a| a.to_str().is_none()) else {
        return "an argument is not UTF-8: give every argument as text".into();
    };
    let flag = i
        .checked_sub(1)
        .and_then(|p| args[p].to_str())
        .filter(|a| a.starts_with('-'))
        .map(|f| format!(" (the value of {f})"))
        .unwrap_or_default();
    format!(
        "argument {i} {:?}{flag} is not UTF-8: give it as text",
        args[i].to_string_lossy()
    )
}

/// Parses a destination `IP:PORT` (`[IPv6]:PORT`), naming what is wrong: the address, or the
/// port and its range.
pub(crate) fn parse_dst(s: &str) -> Result<std::net::SocketAddr, String> {
    let s = s.trim();
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let Some((ip, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "'{s}' has no port: give IP:PORT, e.g. 10.96.0.1:443 or [fd00::1]:443"
        ));
    };
    let bare = ip.trim_start_matches('[').trim_end_matches(']');
    let ip: std::net::IpAddr = bare.parse().map_err(|_| {
        format!("'{ip}' is not an IP address: give IP:PORT, e.g. 10.96.0.1:443 or [fd00::1]:443")
    })?;
    Ok(std::net::SocketAddr::new(ip, parse_port(port)?))
}

/// Parses a listening address `IP:PORT` (`[IPv6]:PORT`); `[IPv4]:PORT` is taken too, so one
/// manifest (`[$(NODE_IP)]:9967`) fits IPv4 and IPv6 nodes alike.
pub(crate) fn parse_listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    let s = s.trim();
    let bad = || {
        format!(
            "'{s}' is not an address to listen on: give IP:PORT, e.g. 127.0.0.1:9967, [::1]:9967 \
            or [10.0.0.5]:9967"
        )
    };
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let (ip, port) = s
        .strip_prefix('[')
        .and_then(|rest| rest.split_once("]:"))
        .ok_or_else(bad)?;
    let ip: std::net::Ipv4Addr = ip.parse().map_err(|_| bad())?;
    Ok(std::net::SocketAddr::from((ip, parse_port(port)?)))
}

#[cfg(test)]
mod tests {
    use super::{parse_dst, parse_listen_addr};

    #[test]
    fn destinations_name_the_bad_part() {
        assert_eq!(
            parse_dst("10.0.0.1:80").map(|a| a.to_string()),
            Ok("10.0.0.1:80".into())
        );
        assert_eq!(
            parse_dst("[fd00::1]:443").map(|a| a.to_string()),
            Ok("[fd00::1]:443".into())
        );
        let e = parse_dst("10.0.0.1:70000").unwrap_err();
        assert!(
            e.contains("port 70000, above 65535") && e.contains("1 to 65535"),
            "{e}"
        );
        assert!(parse_dst("10.0.0.1").unwrap_err().contains("has no port"));
        assert!(parse_dst("ten:80")
            .unwrap_err()
            .contains("'ten' is not an IP address"));
    }

    #[test]
    fn listen_addresses_of_both_families_with_or_without_brackets() {
        for (given, want) in [
            ("127.0.0.1:9967", "127.0.0.1:9967"),
            ("[10.0.0.5]:9967", "10.0.0.5:9967"),
            ("[fd00::5]:9967", "[fd00::5]:9967"),
            (" [::1]:0 ", "[::1]:0"),
        ] {
            assert_eq!(
                parse_listen_addr(given).map(|a| a.to_string()),
                Ok(want.to_owned())
            );
        }
        for bad in [
            "",
            "9967",
            "fd00::5:9967",
            "[10.0.0.5]",
            "[10.0.0.5]:x",
            "[$(NODE_IP)]:9967",
        ] {
            let e = parse_listen_addr(bad).expect_err(bad);
            assert!(
                e.contains("e.g. 127.0.0.1:9967") || e.contains("port"),
                "{bad}: {e}"
            );
        }
    }
}
