//! The enrollment file's record (`enrollments/COOKIE.json`): what a restart re-adopts. The wire
//! form a client lists (`redirect_daemon_api::Enrollment`) adds what only the kernel knows.
use std::{net::IpAddr, path::PathBuf};

use serde::{Deserialize, Serialize};

use redirect_common::NetnsCookie;
use redirect_daemon_api::{Enrollment, PodRef};
use redirect_policy::Policy;

/// One enrolled namespace, as its state file keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Namespace file.
    pub netns: PathBuf,
    /// Its netns cookie (the key of every map entry it owns).
    pub cookie: NetnsCookie,
    /// Where the policy came from.
    pub source: String,
    /// The policy.
    pub policy: Policy,
    /// Its addresses, as last synchronised.
    pub addrs: Vec<IpAddr>,
    /// Whether its IPv6 traffic follows the policy.
    pub ipv6: bool,
    /// Whether inbound capture is on.
    pub inbound: bool,
    /// The Kubernetes pod this namespace belongs to, when the CNI plugin enrolled it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
}

impl Record {
    /// The wire form, with whether the proxy listens on its outbound port now.
    pub fn to_wire(&self, proxy_listening: bool) -> Enrollment {
        Enrollment {
            netns: self.netns.clone(),
            cookie: self.cookie,
            source: self.source.clone(),
            policy: self.policy.clone(),
            addrs: self.addrs.clone(),
            ipv6: self.ipv6,
            inbound: self.inbound,
            proxy_listening,
            pod: self.pod.clone(),
        }
    }
}
