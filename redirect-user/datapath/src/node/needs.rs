//! What a policy needs of the loaded datapath beyond the required kernel features: inbound
//! `-c`/`-k` interfaces need sk_lookup's `ingress_ifindex`, which a datapath loaded on an
//! older kernel (or with the feature assumed missing) runs without. Checked before anything
//! of the policy is written.
use std::path::Path;

use redirect_common::prog_names;
use redirect_policy::{inbound_spec_of, Policy};

use crate::{
    error::{Error, Result},
    load::probe,
};

/// The flag of `policy` that needs the arrival interface for inbound capture (`-c NAMES` or
/// `-k NAMES`), if any: none when inbound capture is off (`-b ''`).
pub(crate) fn interface_flag(policy: &Policy, netns_path: &Path) -> Option<String> {
    inbound_spec_of(policy, netns_path)?;
    [
        ("-c", &policy.exclude_interfaces),
        ("-k", &policy.kube_virt_interfaces),
    ]
    .into_iter()
    .find(|(_, names)| !names.is_empty())
    .map(|(flag, names)| format!("{flag} {}", names.join(",")))
}

/// Refuses `policy` when it needs the arrival interface and the datapath runs
/// `sk_lookup` (the pinned program's name) without it.
pub(crate) fn check(sk_lookup: &str, policy: &Policy, netns_path: &Path) -> Result<()> {
    if sk_lookup != prog_names::SK_LOOKUP_NO_IFINDEX {
        return Ok(());
    }
    let Some(flag) = interface_flag(policy, netns_path) else {
        return Ok(());
    };
    let feature = probe::INGRESS_IFINDEX_FEATURE;
    let assumed = probe::assumed_missing().contains(&feature.id);
    let now = probe::probe_as(&feature, assumed);
    let why = if now.present {
        " (it has it, but the datapath was created while it was assumed missing: recreate it to use it)".to_owned()
    } else {
        probe::detail(&now)
    };
    Err(Error::FeatureNeeded {
        feature: feature.name,
        flag,
        since: feature.since,
        kernel: probe::kernel_release(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_inbound_interfaces_need_the_field() {
        let ns = Path::new("/run/netns/x");
        let mut p = Policy {
            inbound_ports: redirect_policy::InboundPorts::All,
            ..Policy::default()
        };
        assert_eq!(interface_flag(&p, ns), None);
        p.exclude_interfaces = vec!["net1".into(), "net2".into()];
        assert_eq!(interface_flag(&p, ns).as_deref(), Some("-c net1,net2"));
        p.exclude_interfaces.clear();
        p.kube_virt_interfaces = vec!["k1".into()];
        assert_eq!(interface_flag(&p, ns).as_deref(), Some("-k k1"));
        // No inbound capture: the interfaces matter only to outbound (-c routes).
        p.inbound_ports = redirect_policy::InboundPorts::List(Vec::new());
        assert_eq!(interface_flag(&p, ns), None);
    }

    #[test]
    fn the_full_program_takes_every_policy() {
        let p = Policy {
            exclude_interfaces: vec!["net1".into()],
            inbound_ports: redirect_policy::InboundPorts::All,
            ..Policy::default()
        };
        let ns = Path::new("/run/netns/x");
        assert!(check(prog_names::SK_LOOKUP, &p, ns).is_ok());
        assert!(check(prog_names::SK_LOOKUP_NO_IFINDEX, &p, ns).is_err());
    }
}
