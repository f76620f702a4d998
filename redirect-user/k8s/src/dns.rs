//! The DNS servers a DNS-capturing pod's resolv.conf will name, from its dnsPolicy, dnsConfig and
//! the cluster DNS address (never the node's resolv.conf).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Pod;

use crate::Error;

/// The servers kubelet writes into the pod's resolv.conf: the cluster DNS for `ClusterFirst`
/// (the default) and `ClusterFirstWithHostNet`, none for `None`, then `dnsConfig.nameservers`.
/// `Default` (the node's resolv.conf) and a `ClusterFirst` pod without `cluster_dns` are
/// errors: capturing DNS to a guessed server would miss the real one.
pub(crate) fn servers(pod: &Pod, cluster_dns: Option<IpAddr>) -> Result<Vec<IpAddr>, Error> {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let extra = spec
        .and_then(|s| s.dns_config.as_ref())
        .and_then(|c| c.nameservers.as_deref())
        .unwrap_or_default();
    let whole = extra.join(",");
    let mut list = Vec::new();
    for s in extra {
        let ip = s.parse::<IpAddr>().map_err(|_| {
            Error::invalid(
                "spec.dnsConfig.nameservers",
                &whole,
                s,
                "is not an IP address",
            )
        })?;
        list.push(ip);
    }
    const NEEDS: &str = "the pod captures DNS (istio-proxy env ISTIO_META_DNS_CAPTURE=true)";
    let mut out = match policy {
        "ClusterFirst" | "ClusterFirstWithHostNet" => match cluster_dns {
            Some(ip) => vec![ip],
            None => {
                return Err(Error::NoDnsServer(format!(
                    "{NEEDS} and its dnsPolicy is {policy}, so its DNS server is the cluster DNS, \
                        whose address is not known here: give the daemon --cluster-dns (the \
                        kubelet's clusterDNS, e.g. 10.96.0.10), or let it read the kube-dns \
                        Service at start (rbac.yaml)"
                )))
            }
        },
        "None" => Vec::new(),
        "Default" => {
            return Err(Error::NoDnsServer(format!(
                "{NEEDS} and its dnsPolicy is Default, so its DNS servers are the node's \
                    resolv.conf's, which is never read for a pod: give the pod dnsPolicy None with \
                    dnsConfig.nameservers, or ClusterFirst"
            )))
        }
        other => {
            return Err(Error::invalid(
                "spec.dnsPolicy",
                other,
                other,
                "is not a DNS policy (ClusterFirst, ClusterFirstWithHostNet, Default or None)",
            ))
        }
    };
    for ip in list {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    if out.is_empty() {
        return Err(Error::NoDnsServer(format!(
            "{NEEDS} but names no DNS server: its dnsPolicy is None and spec.dnsConfig.nameservers is empty"
        )));
    }
    Ok(out)
}
