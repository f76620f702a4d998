//! Inbound capture specs (`--inbound NETNS[:b=..][:d=..]...`), mirroring istio-iptables -b/-d/-z/-e.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Which inbound ports are captured (istio-iptables `-b`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum InboundPorts {
    /// `*`: every port except the excluded ones.
    All,
    /// Only these ports.
    List(Vec<u16>),
    /// Empty: inbound capture disabled.
    None,
}

/// What happens to a captured connection when no proxy listens on the inbound port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NoListener {
    /// Refuse it, like iptables REDIRECT to a closed port.
    Refuse,
    /// Let it reach the application directly.
    Passthrough,
}

/// Inbound capture of one network namespace (a pod or a VM).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboundSpec {
    /// The namespace file (`/run/netns/NAME` for a bare name).
    pub netns: PathBuf,
    /// `-b`.
    pub ports: InboundPorts,
    /// `-d`: never captured.
    pub exclude: Vec<u16>,
    /// `-z`: the proxy's inbound listener port.
    pub inbound_port: u16,
    /// `-e`: the tunnel port, never captured.
    pub tunnel_port: u16,
    /// Behaviour without a listener.
    pub no_listener: NoListener,
    /// `-m TPROXY`: connections made inside the pod are never steered whatever their source
    /// (the proxy's transparent hop), and the namespace gets TPROXY's policy routing.
    #[serde(default)]
    pub tproxy: bool,
}

/// Istio's default `-d` for sidecars.
pub const DEFAULT_EXCLUDE: [u16; 3] = [15090, 15021, 15020];

fn port(key: &str, v: &str) -> Result<u16, String> {
    match v.trim().parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(p as u16),
        _ => Err(format!("{key}: '{v}' is not a port from 1 to 65535")),
    }
}

fn ports(key: &str, v: &str) -> Result<Vec<u16>, String> {
    v.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| port(key, p))
        .collect()
}

impl std::str::FromStr for InboundSpec {
    type Err = String;

    /// `NETNS[:b=PORTS|*][:d=PORTS][:z=PORT][:e=PORT][:no-listener=refuse|passthrough]`
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(':');
        let ns = parts.next().unwrap_or_default().trim();
        if ns.is_empty() {
            return Err("missing the network namespace: NAME or /path/to/netns first".into());
        }
        let netns = if ns.contains('/') {
            PathBuf::from(ns)
        } else if ns == "." || ns == ".." {
            return Err(format!(
                "'{ns}' is not a network namespace name: give NAME (of /run/netns) or a path"
            ));
        } else {
            PathBuf::from("/run/netns").join(ns)
        };
        let mut spec = Self {
            netns,
            ports: InboundPorts::All,
            exclude: DEFAULT_EXCLUDE.to_vec(),
            inbound_port: 15006,
            tunnel_port: 15008,
            no_listener: NoListener::Refuse,
            tproxy: false,
        };
        for part in parts {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("'{part}' is not KEY=VALUE (keys: b, d, z, e, no-listener)")
            })?;
            match key {
                "b" => {
                    spec.ports = match value.trim() {
                        "*" => InboundPorts::All,
                        "" => InboundPorts::None,
                        list => InboundPorts::List(ports("b", list)?),
                    }
                }
                "d" => spec.exclude = ports("d", value)?,
                "z" => spec.inbound_port = port("z", value)?,
                "e" => spec.tunnel_port = port("e", value)?,
                "no-listener" => {
                    spec.no_listener = match value {
                        "refuse" => NoListener::Refuse,
                        "passthrough" => NoListener::Passthrough,
                        other => {
                            return Err(format!(
                                "no-listener: '{other}' is not refuse or passthrough"
                            ))
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "unknown key '{other}' (keys: b, d, z, e, no-listener)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_istio_sidecar_defaults() {
        let s: InboundSpec = "pod1".parse().expect("spec");
        assert_eq!(s.netns, PathBuf::from("/run/netns/pod1"));
        assert_eq!(s.ports, InboundPorts::All);
        assert_eq!(s.exclude, [15090, 15021, 15020]);
        assert_eq!(
            (s.inbound_port, s.tunnel_port, s.no_listener),
            (15006, 15008, NoListener::Refuse)
        );
    }

    #[test]
    fn keys_override() {
        let s: InboundSpec =
            "/proc/42/ns/net:b=9080,9090:d=22,15021:z=16006:e=16008:no-listener=passthrough"
                .parse()
                .expect("spec");
        assert_eq!(s.netns, PathBuf::from("/proc/42/ns/net"));
        assert_eq!(s.ports, InboundPorts::List(vec![9080, 9090]));
        assert_eq!(s.exclude, [22, 15021]);
        assert_eq!(
            (s.inbound_port, s.tunnel_port, s.no_listener),
            (16006, 16008, NoListener::Passthrough)
        );
        let off: InboundSpec = "p:b=".parse().expect("spec");
        assert_eq!(off.ports, InboundPorts::None);
        let no_excludes: InboundSpec = "p:d=".parse().expect("spec");
        assert!(no_excludes.exclude.is_empty());
    }

    #[test]
    fn errors_name_the_key_and_value() {
        let err = "p:b=80,99999".parse::<InboundSpec>().expect_err("bad");
        assert!(err.contains("b: '99999'"), "{err}");
        assert!("p:z=0"
            .parse::<InboundSpec>()
            .expect_err("bad")
            .contains("z: '0'"));
        assert!("p:x=1"
            .parse::<InboundSpec>()
            .expect_err("bad")
            .contains("unknown key 'x'"));
        assert!("p:b"
            .parse::<InboundSpec>()
            .expect_err("bad")
            .contains("KEY=VALUE"));
        assert!(":b=*"
            .parse::<InboundSpec>()
            .expect_err("bad")
            .contains("namespace"));
        assert!("p:no-listener=maybe".parse::<InboundSpec>().is_err());
    }
}
