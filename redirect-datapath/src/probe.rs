//! Kernel features the datapath uses, each with what needs it and the kernel that added it,
//! probed before anything is loaded: a missing one is a sentence, not a verifier log. The
//! README's kernel table is this list (a test keeps them the same).
use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{is_helper_supported, is_map_supported, is_program_supported, BpfHelper},
};
use serde::Serialize;

use crate::{
    bpfsys,
    error::{Error, Result},
};

/// How a feature is probed.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// The kernel loads programs of this type.
    Program(ProgramType),
    /// The kernel creates maps of this type.
    Map(MapType),
    /// Programs of this type may call this helper.
    Helper(ProgramType, BpfHelper),
    /// sk_lookup programs may read `ingress_ifindex`.
    SkLookupIngressIfindex,
    /// A helper id no kernel has: shows what a missing feature looks like.
    Nonexistent,
}

/// One kernel feature.
#[derive(Debug, Clone, Copy)]
pub struct Feature {
    /// What it is, as the kernel documentation names it.
    pub name: &'static str,
    /// What of ours needs it.
    pub needed_by: &'static str,
    /// The first kernel release that has it.
    pub since: &'static str,
    /// How to tell.
    pub check: Check,
}

const fn f(
    name: &'static str,
    needed_by: &'static str,
    since: &'static str,
    check: Check,
) -> Feature {
    Feature {
        name,
        needed_by,
        since,
        check,
    }
}

use BpfHelper as H;
use ProgramType as P;

/// Every feature the datapath uses, in the order the README lists them.
pub const FEATURES: &[Feature] = &[
    f(
        "cgroup_sock_addr programs",
        "connect4/6, sendmsg/recvmsg, getpeername (capture)",
        "4.17",
        Check::Program(P::CgroupSockAddr),
    ),
    f(
        "sock_ops programs",
        "sock_ops (tracking, listeners)",
        "4.13",
        Check::Program(P::SockOps),
    ),
    f(
        "cgroup_sockopt programs",
        "getsockopt (SO_ORIGINAL_DST)",
        "5.3",
        Check::Program(P::CgroupSockopt),
    ),
    f(
        "sk_lookup programs",
        "sk_lookup (inbound capture)",
        "5.9",
        Check::Program(P::SkLookup),
    ),
    f(
        "sk_lookup ingress_ifindex",
        "inbound -c/-k (excluded and KubeVirt interfaces)",
        "5.17",
        Check::SkLookupIngressIfindex,
    ),
    f(
        "bpf_get_netns_cookie in cgroup_sock_addr",
        "per-namespace policy of the capture hooks",
        "5.7",
        Check::Helper(P::CgroupSockAddr, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "bpf_get_netns_cookie in cgroup_sockopt",
        "getsockopt's per-namespace tracking key",
        "5.8",
        Check::Helper(P::CgroupSockopt, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "bpf_get_netns_cookie in sock_ops",
        "sock_ops' per-namespace tracking key",
        "5.15",
        Check::Helper(P::SockOps, H::BPF_FUNC_get_netns_cookie),
    ),
    f(
        "bpf_get_socket_cookie in sock_ops",
        "the TRACKED hand-off's owner",
        "5.0",
        Check::Helper(P::SockOps, H::BPF_FUNC_get_socket_cookie),
    ),
    f(
        "bpf_get_current_ancestor_cgroup_id in cgroup_sock_addr",
        "--proxy-cgroup (the proxy identified by its cgroup)",
        "5.7",
        Check::Helper(
            P::CgroupSockAddr,
            H::BPF_FUNC_get_current_ancestor_cgroup_id,
        ),
    ),
    f(
        "bpf_sk_storage_get in cgroup_sock_addr",
        "the original destination in SOCK_STATE (connect, sendmsg, getpeername, recvmsg, bind)",
        "5.3",
        Check::Helper(P::CgroupSockAddr, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "bpf_sk_storage_get in sock_ops",
        "the hand-off claim and counting only the proxy's listeners (PROXY_LISTENERS)",
        "5.3",
        Check::Helper(P::SockOps, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "bpf_sk_storage_get in cgroup_sockopt",
        "SO_ORIGINAL_DST from the proxy socket's claimed destination",
        "5.3",
        Check::Helper(P::CgroupSockopt, H::BPF_FUNC_sk_storage_get),
    ),
    f(
        "bpf_sk_assign in sk_lookup",
        "sk_lookup steering to the proxy's listener",
        "5.9",
        Check::Helper(P::SkLookup, H::BPF_FUNC_sk_assign),
    ),
    f(
        "LPM trie maps",
        "-i/-x CIDRs, -c routes",
        "4.11",
        Check::Map(MapType::LpmTrie),
    ),
    f(
        "LRU hash maps",
        "INBOUND",
        "4.10",
        Check::Map(MapType::LruHash),
    ),
    f(
        "sockhash maps",
        "LISTENERS (the proxy's inbound listener)",
        "4.18",
        Check::Map(MapType::SockHash),
    ),
    f(
        "per-CPU hash maps",
        "NETNS_COUNTERS",
        "4.6",
        Check::Map(MapType::PerCpuHash),
    ),
    f(
        "socket storage maps",
        "SOCK_STATE (per-socket marks and original destinations)",
        "5.2",
        Check::Map(MapType::SkStorage),
    ),
    f(
        "ring buffer maps",
        "TRACE (redirect trace)",
        "5.8",
        Check::Map(MapType::RingBuf),
    ),
];

/// A probe's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Probed {
    /// The feature.
    pub name: &'static str,
    /// What needs it.
    pub needed_by: &'static str,
    /// The kernel that added it.
    pub since: &'static str,
    /// Whether this kernel has it.
    pub present: bool,
    /// Why the probe could not tell, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Probes one feature.
pub fn probe(feature: &Feature) -> Probed {
    let answer: std::result::Result<bool, String> = match feature.check {
        Check::Program(t) => is_program_supported(t).map_err(|e| e.to_string()),
        Check::Map(t) => is_map_supported(t).map_err(|e| e.to_string()),
        Check::Helper(t, h) => is_helper_supported(t, h).map_err(|e| e.to_string()),
        Check::SkLookupIngressIfindex => Ok(bpfsys::sk_lookup_reads_ingress_ifindex()),
        // An id past every helper any kernel knows.
        Check::Nonexistent => Ok(bpfsys::helper_id_is_known(u32::MAX >> 1)),
    };
    let (present, error) = match answer {
        Ok(p) => (p, None),
        Err(e) => (false, Some(e)),
    };
    Probed {
        name: feature.name,
        needed_by: feature.needed_by,
        since: feature.since,
        present,
        error,
    }
}

/// Probes every feature.
pub fn probe_all() -> Vec<Probed> {
    FEATURES.iter().map(probe).collect()
}

/// The first missing feature as an error naming it, what needs it and the kernel that added it.
pub fn missing(probed: &[Probed]) -> Option<Error> {
    probed
        .iter()
        .find(|p| !p.present)
        .map(|p| Error::MissingFeature {
            feature: p.name,
            needed_by: p.needed_by,
            since: p.since,
            kernel: kernel_release(),
            detail: p
                .error
                .as_ref()
                .map(|e| format!(" (the probe itself failed: {e})"))
                .unwrap_or_default(),
        })
}

/// Probes every feature; the first missing one is an error.
pub fn require_all() -> Result<()> {
    match missing(&probe_all()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// This kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// The feature no kernel has, for showing what a missing feature says.
pub const NONEXISTENT: Feature = f(
    "BPF helper #2147483647",
    "the --demo-missing check of `redirect probe`",
    "none",
    Check::Nonexistent,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_table_is_the_feature_list() {
        let readme = include_str!("../../README.md");
        for f in FEATURES {
            let row = format!("| {} | {} | {} |", f.name, f.needed_by, f.since);
            assert!(
                readme.contains(&row),
                "README.md lacks the kernel-table row {row}"
            );
        }
    }

    #[test]
    fn a_missing_feature_is_a_sentence() {
        let p = Probed {
            name: "x helper",
            needed_by: "the y hook",
            since: "5.17",
            present: false,
            error: None,
        };
        let e = missing(&[p]).expect("missing").to_string();
        assert!(
            e.contains("x helper") && e.contains("the y hook") && e.contains("5.17"),
            "{e}"
        );
    }
}
