//! The service registry (stand-in for Kubernetes Services / ServiceEntries) and cluster choice.
use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
    sync::atomic::{AtomicUsize, Ordering},
};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Istio's `meshConfig.outboundTrafficPolicy.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum OutboundTrafficPolicy {
    /// Unknown destinations go to `PassthroughCluster`.
    #[default]
    #[serde(rename = "ALLOW_ANY")]
    AllowAny,
    /// Unknown destinations go to `BlackHoleCluster`.
    #[serde(rename = "REGISTRY_ONLY")]
    RegistryOnly,
}

impl std::str::FromStr for OutboundTrafficPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ALLOW_ANY" => Ok(Self::AllowAny),
            "REGISTRY_ONLY" => Ok(Self::RegistryOnly),
            other => Err(format!(
                "'{other}' is not an outbound traffic policy: use ALLOW_ANY or REGISTRY_ONLY"
            )),
        }
    }
}

/// A service: where it is (addresses or CIDRs), which ports, and optional endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    /// Hostname, e.g. `reviews.default.svc.cluster.local`.
    pub name: String,
    /// Addresses or CIDRs the service answers on (a bare address is a /32 or /128).
    pub addresses: Vec<String>,
    /// Ports the service answers on.
    pub ports: Vec<u16>,
    /// Where to send its connections; empty means the original destination.
    #[serde(default)]
    pub endpoints: Vec<SocketAddr>,
}

/// The registry file (JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryFile {
    /// What happens to destinations no service matches.
    #[serde(default)]
    pub outbound_traffic_policy: OutboundTrafficPolicy,
    /// Known services.
    #[serde(default)]
    pub services: Vec<Service>,
}

/// Why a registry could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file could not be read.
    #[error("reading registry file {path}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid registry JSON.
    #[error("parsing registry file {path} at {field}")]
    Parse {
        /// The file.
        path: String,
        /// Where in it: `services[0].ports[1]`, or `the top level`.
        field: String,
        /// The JSON error (names the bad value, its line and column).
        #[source]
        source: serde_json::Error,
    },
    /// An address is neither an IP nor a CIDR.
    #[error(
        "service {service}: address '{address}' is neither an IP address nor a CIDR (e.g. \
        10.96.0.10 or 10.96.0.0/16)"
    )]
    Address {
        /// The service.
        service: String,
        /// The bad value.
        address: String,
    },
    /// A service lists no ports.
    #[error("service {service} lists no ports")]
    NoPorts {
        /// The service.
        service: String,
    },
    /// A port 0 among a service's ports or endpoints: nothing can be reached there.
    #[error("service {service}: {what} '{value}' has port 0 (use 1-65535)")]
    PortZero {
        /// The service.
        service: String,
        /// `port` or `endpoint`.
        what: &'static str,
        /// The bad value.
        value: String,
    },
}

impl RegistryFile {
    /// Parses registry JSON; `path` names the file in errors.
    pub fn parse(path: &str, text: &str) -> Result<Self, RegistryError> {
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de).map_err(|e| RegistryError::Parse {
            path: path.to_owned(),
            field: match e.path().to_string().as_str() {
                "." => "the top level".to_owned(),
                p => p.to_owned(),
            },
            source: e.into_inner(),
        })
    }
}

#[derive(Debug)]
struct CompiledService {
    name: String,
    nets: Vec<IpNet>,
    ports: Vec<u16>,
    endpoints: Vec<SocketAddr>,
    next: AtomicUsize,
}

/// Where a connection goes, named as Envoy names clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cluster {
    /// A known service: `outbound|<port>||<name>`.
    Outbound {
        /// Service port.
        port: u16,
        /// Service name.
        name: String,
        /// Upstream chosen for this connection.
        upstream: SocketAddr,
    },
    /// Unknown destination, ALLOW_ANY: forwarded as is.
    Passthrough,
    /// Unknown destination, REGISTRY_ONLY: refused.
    BlackHole,
    /// Inbound to the application: `inbound|<port>||`.
    Inbound {
        /// Original destination port.
        port: u16,
    },
}

impl std::fmt::Display for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Outbound { port, name, .. } => write!(f, "outbound|{port}||{name}"),
            Self::Passthrough => f.write_str("PassthroughCluster"),
            Self::BlackHole => f.write_str("BlackHoleCluster"),
            Self::Inbound { port } => write!(f, "inbound|{port}||"),
        }
    }
}

/// A compiled registry: answers "which cluster for this original destination".
#[derive(Debug, Default)]
pub struct Registry {
    policy: OutboundTrafficPolicy,
    services: Vec<CompiledService>,
}

fn parse_net(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

impl Registry {
    /// Compiles a parsed registry file.
    pub fn from_file_contents(file: RegistryFile) -> Result<Self, RegistryError> {
        let mut services = Vec::with_capacity(file.services.len());
        for s in file.services {
            if s.ports.is_empty() {
                return Err(RegistryError::NoPorts { service: s.name });
            }
            let zero = |what, value: String| RegistryError::PortZero {
                service: s.name.clone(),
                what,
                value,
            };
            if s.ports.contains(&0) {
                return Err(zero("port", "0".to_owned()));
            }
            if let Some(e) = s.endpoints.iter().find(|e| e.port() == 0) {
                return Err(zero("endpoint", e.to_string()));
            }
            let nets = s
                .addresses
                .iter()
                .map(|a| {
                    parse_net(a.trim()).ok_or_else(|| RegistryError::Address {
                        service: s.name.clone(),
                        address: a.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            services.push(CompiledService {
                name: s.name,
                nets,
                ports: s.ports,
                endpoints: s.endpoints,
                next: AtomicUsize::new(0),
            });
        }
        Ok(Self {
            policy: file.outbound_traffic_policy,
            services,
        })
    }

    /// Reads and compiles a registry JSON file.
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Read {
            path: shown.clone(),
            source,
        })?;
        Self::from_file_contents(RegistryFile::parse(&shown, &text)?)
    }

    /// The policy in force.
    pub fn policy(&self) -> OutboundTrafficPolicy {
        self.policy
    }

    /// Overrides the policy (the command line wins over the file).
    pub fn set_policy(&mut self, policy: OutboundTrafficPolicy) {
        self.policy = policy;
    }

    /// The cluster for an outbound connection to `dst`. Endpoints rotate round-robin.
    pub fn route(&self, dst: SocketAddr) -> Cluster {
        let found = self.services.iter().find(|s| {
            s.ports.contains(&dst.port()) && s.nets.iter().any(|n| n.contains(&dst.ip()))
        });
        match (found, self.policy) {
            (Some(s), _) => {
                let upstream = if s.endpoints.is_empty() {
                    dst
                } else {
                    s.endpoints[s.next.fetch_add(1, Ordering::Relaxed) % s.endpoints.len()]
                };
                Cluster::Outbound {
                    port: dst.port(),
                    name: s.name.clone(),
                    upstream,
                }
            }
            (None, OutboundTrafficPolicy::AllowAny) => Cluster::Passthrough,
            (None, OutboundTrafficPolicy::RegistryOnly) => Cluster::BlackHole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(json: &str) -> Registry {
        Registry::from_file_contents(serde_json::from_str(json).expect("json")).expect("compile")
    }

    const FILE: &str = r#"{
        "outbound_traffic_policy": "REGISTRY_ONLY",
        "services": [
            {"name": "reviews.default.svc.cluster.local", "addresses": ["10.96.0.10"], "ports": [9080],
             "endpoints": ["10.1.0.5:9080", "10.1.0.6:9080"]},
            {"name": "db.external", "addresses": ["192.0.2.0/24", "2001:db8::/32"], "ports": [5432]}
        ]
    }"#;

    #[test]
    fn known_service_gets_outbound_cluster_and_rotates_endpoints() {
        let r = registry(FILE);
        let dst: SocketAddr = "10.96.0.10:9080".parse().expect("addr");
        let first = r.route(dst);
        assert_eq!(
            first.to_string(),
            "outbound|9080||reviews.default.svc.cluster.local"
        );
        let Cluster::Outbound { upstream: a, .. } = first else {
            panic!("outbound")
        };
        let Cluster::Outbound { upstream: b, .. } = r.route(dst) else {
            panic!("outbound")
        };
        assert_eq!(
            (a.to_string(), b.to_string()),
            ("10.1.0.5:9080".into(), "10.1.0.6:9080".into())
        );
    }

    #[test]
    fn cidr_service_without_endpoints_uses_original_destination() {
        let r = registry(FILE);
        let dst: SocketAddr = "192.0.2.77:5432".parse().expect("addr");
        assert_eq!(
            r.route(dst),
            Cluster::Outbound {
                port: 5432,
                name: "db.external".into(),
                upstream: dst
            }
        );
        let v6: SocketAddr = "[2001:db8::1]:5432".parse().expect("addr");
        assert!(matches!(r.route(v6), Cluster::Outbound { .. }));
    }

    #[test]
    fn unknown_destination_follows_policy() {
        let mut r = registry(FILE);
        let other: SocketAddr = "10.96.0.10:80".parse().expect("addr");
        assert_eq!(r.route(other), Cluster::BlackHole);
        assert_eq!(r.route(other).to_string(), "BlackHoleCluster");
        r.set_policy(OutboundTrafficPolicy::AllowAny);
        assert_eq!(r.route(other).to_string(), "PassthroughCluster");
    }

    #[test]
    fn bad_address_is_named() {
        let file: RegistryFile = serde_json::from_str(
            r#"{"services":[{"name":"x","addresses":["10.0.0.300"],"ports":[80]}]}"#,
        )
        .expect("json");
        let err = Registry::from_file_contents(file)
            .expect_err("bad")
            .to_string();
        assert!(
            err.contains("10.0.0.300") && err.contains("service x"),
            "{err}"
        );
    }

    /// Found by tests/fuzz.rs: port 0 was accepted, and every connection to it failed later.
    #[test]
    fn port_zero_is_refused_naming_the_service() {
        for (json, named) in [
            (
                r#"{"services":[{"name":"x","addresses":["10.0.0.1"],"ports":[80,0]}]}"#,
                "port '0'",
            ),
            (
                r#"{"services":[{"name":"x","addresses":["10.0.0.1"],"ports":[80],"endpoints":["10.1.0.5:0"]}]}"#,
                "endpoint '10.1.0.5:0'",
            ),
        ] {
            let file = RegistryFile::parse("f", json).expect("json");
            let err = Registry::from_file_contents(file)
                .expect_err("port 0")
                .to_string();
            assert!(err.contains("service x") && err.contains(named), "{err}");
        }
    }

    #[test]
    fn json_errors_name_the_field() {
        let err = RegistryFile::parse(
            "f",
            r#"{"services":[{"name":"x","addresses":[],"ports":[70000]}]}"#,
        )
        .expect_err("70000");
        let chain = format!(
            "{err}: {}",
            std::error::Error::source(&err).expect("source")
        );
        assert!(
            chain.contains("services[0].ports[0]") && chain.contains("70000"),
            "{chain}"
        );
    }

    #[test]
    fn policy_parses() {
        assert_eq!(
            "REGISTRY_ONLY".parse(),
            Ok(OutboundTrafficPolicy::RegistryOnly)
        );
        assert!("allow".parse::<OutboundTrafficPolicy>().is_err());
    }
}
