//! The kubelet's configuration file for the test node: x509 clients of the cluster CA and
//! the apiserver's webhook decide who may call it, the cgroupfs driver under the node's cgroup
//! root, the cluster DNS address, no eviction for a test machine's disk and no image garbage
//! collection (nothing here can be pulled again).
use super::{
    node::{CLUSTER_DNS, NODE_IP},
    pki::Pki,
};

/// `KubeletConfiguration` (v1beta1) as YAML.
pub(super) fn config(pki: &Pki, cgroup_root: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {NODE_IP}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
clusterDNS: [{CLUSTER_DNS}]
clusterDomain: cluster.local
failSwapOn: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {{memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}
serializeImagePulls: false
fileCheckFrequency: 5s
syncFrequency: 10s
nodeStatusUpdateFrequency: 4s
resolvConf: /etc/resolv.conf
",
        ca = pki.ca().display()
    )
}
