//! The cluster DNS address when `--cluster-dns` is not given: the cluster IP of the Service the
//! kubelets' `clusterDNS` points at (`kube-system/kube-dns` by default, the name CoreDNS keeps),
//! read once at start through the daemon's own client (RBAC: `get` on that one Service).
use std::{net::IpAddr, time::Duration};

use k8s_openapi::api::core::v1::Service;
use kube::{Api, Config};

/// Attempts of the GET at start (a short bound: the daemon must come up without it).
const ATTEMPTS: u32 = 2;
/// Pause between them.
const INTERVAL: Duration = Duration::from_millis(500);

/// `NAMESPACE/NAME` (of the Service, and of install-cni's `--daemonset`), parsed; the error
/// names the value.
pub fn parse_service(text: &str) -> Result<(String, String), String> {
    match text.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!(
            "{text:?} is not NAMESPACE/NAME (e.g. kube-system/kube-dns)"
        )),
    }
}

/// The cluster IP of Service `ns/name`: its first address, not `None` (a headless Service has
/// no address a pod's resolv.conf could name).
pub(crate) fn read(
    rt: &tokio::runtime::Handle,
    config: &Config,
    (ns, name): &(String, String),
) -> Result<IpAddr, String> {
    let client = {
        let _entered = rt.enter();
        crate::credentials::client(config.clone()).map_err(|e| format!("the client: {e}"))?
    };
    let api: Api<Service> = Api::namespaced(client, ns);
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        match rt.block_on(api.get(name)) {
            Ok(service) => {
                return cluster_ip(&service).map_err(|e| format!("Service {ns}/{name}: {e}"))
            }
            // Not there: asking again will not make it be.
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(format!(
                    "Service {ns}/{name} does not exist (pass --cluster-dns-service)"
                ))
            }
            Err(e) => last = e.to_string(),
        }
        if attempt < ATTEMPTS {
            std::thread::sleep(INTERVAL);
        }
    }
    Err(format!(
        "GET Service {ns}/{name} failed {ATTEMPTS} times; last: {last}"
    ))
}

fn cluster_ip(service: &Service) -> Result<IpAddr, String> {
    let spec = service.spec.as_ref().ok_or("it has no spec")?;
    let ip = spec
        .cluster_ips
        .as_ref()
        .and_then(|ips| ips.first())
        .or(spec.cluster_ip.as_ref())
        .ok_or("it has no cluster IP")?;
    if ip == "None" {
        return Err("it is headless (clusterIP: None)".into());
    }
    ip.parse()
        .map_err(|_| format!("its cluster IP {ip:?} is not an IP address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kube-dns"}, "spec": spec}))
            .expect("a Service")
    }

    #[test]
    fn the_first_cluster_ip_is_the_address_and_a_headless_service_has_none() {
        let dual = service(
            serde_json::json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::a"]}),
        );
        assert_eq!(cluster_ip(&dual), Ok("10.96.0.10".parse().expect("ip")));
        let headless = service(serde_json::json!({"clusterIP": "None"}));
        assert!(cluster_ip(&headless).is_err_and(|e| e.contains("headless")));
        assert!(cluster_ip(&service(serde_json::json!({}))).is_err());
    }

    #[test]
    fn the_service_is_namespace_slash_name() {
        assert_eq!(
            parse_service("kube-system/kube-dns"),
            Ok(("kube-system".into(), "kube-dns".into()))
        );
        for bad in ["kube-dns", "/kube-dns", "kube-system/", "a/b/c"] {
            assert!(parse_service(bad).is_err_and(|e| e.contains(bad)), "{bad}");
        }
    }
}
