//! Policy -> istio-iptables flags and env -> Policy: whatever a valid policy is, printing it
//! as istio-init would pass it and parsing that gives it back; and every parsed policy
//! validates and survives JSON.
use std::collections::HashMap;

use proptest::prelude::*;
use redirect_policy::{Cidrs, InboundPorts, Mode, NoProxy, OwnerGroups, Policy};
use redirect_testkit::fuzz;

use crate::{policies, support::run};

fn list<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `p` as istio-iptables flags and environment.
fn print(p: &Policy) -> (Vec<String>, HashMap<String, String>) {
    let include = match &p.include_cidrs {
        Cidrs::All => "*".to_owned(),
        Cidrs::List(l) => list(l),
    };
    let inbound = match &p.inbound_ports {
        InboundPorts::All => "*".to_owned(),
        InboundPorts::List(l) => list(l),
    };
    let mode = match p.mode {
        Mode::Redirect => "REDIRECT",
        Mode::Tproxy => "TPROXY",
    };
    let no_proxy = match p.no_proxy {
        NoProxy::Refuse => "refuse",
        NoProxy::Passthrough => "passthrough",
    };
    let mut args: Vec<String> = [
        format!("-p={}", p.proxy_port),
        format!("-z={}", p.inbound_capture_port),
        format!("-e={}", p.tunnel_port),
        format!("-u={}", list(&p.proxy_uids)),
        format!("-g={}", list(&p.proxy_gids)),
        format!("-m={mode}"),
        format!("-i={include}"),
        format!("-x={}", list(&p.exclude_cidrs)),
        format!("-q={}", list(&p.include_ports)),
        format!("-o={}", list(&p.exclude_ports)),
        format!("-b={inbound}"),
        format!("-d={}", list(&p.inbound_exclude_ports)),
        format!("-c={}", list(&p.exclude_interfaces)),
        format!("-k={}", list(&p.kube_virt_interfaces)),
        format!("--redirect-dns={}", p.redirect_dns),
        format!("--capture-all-dns={}", p.capture_all_dns),
        format!("--dual-stack={}", p.dual_stack),
        format!("--drop-invalid={}", p.drop_invalid),
        format!("--dns-servers={}", list(&p.dns_servers)),
        format!("--no-proxy={no_proxy}"),
    ]
    .into();
    if let Some(cg) = &p.proxy_cgroup {
        args.push(format!("--bind-proxy-cgroup={}", cg.display()));
    }
    let mut env = HashMap::from([(
        "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR".to_owned(),
        p.ipv4_loopback_cidr.to_string(),
    )]);
    let names = |g: &[redirect_policy::Group]| list(&g.iter().map(|g| &g.name).collect::<Vec<_>>());
    match &p.owner_groups {
        OwnerGroups::All => {}
        OwnerGroups::Include(g) => {
            env.insert("ISTIO_OUTBOUND_OWNER_GROUPS".into(), names(g));
        }
        OwnerGroups::Exclude(g) => {
            env.insert("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE".into(), names(g));
        }
    }
    (args, env)
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn policy_printed_as_flags_and_env_parses_back(policy in policies::valid()) {
        let (args, env) = print(&policy);
        let parsed = run(&args, &env).map_err(|e| e.to_string());
        // Host bits in a CIDR are cleared, as iptables clears them.
        let mut want = policy;
        want.exclude_cidrs.iter_mut().for_each(|n| *n = n.trunc());
        if let redirect_policy::Cidrs::List(l) = &mut want.include_cidrs {
            l.iter_mut().for_each(|n| *n = n.trunc());
        }
        prop_assert_eq!(parsed.map(|i| i.policy), Ok(want), "{:?} {:?}", args, env);
    }

    #[test]
    fn every_parsed_policy_validates_and_survives_json(policy in policies::valid()) {
        let (args, env) = print(&policy);
        let parsed = run(&args, &env).expect("parses").policy;
        prop_assert!(parsed.validate().is_ok(), "{:?}", parsed.validate());
        let json = serde_json::to_vec(&parsed).expect("serializes");
        let back = redirect_policy::policy_from_json(&json).map_err(|e| e.to_string());
        prop_assert_eq!(back, Ok(parsed));
    }
}
