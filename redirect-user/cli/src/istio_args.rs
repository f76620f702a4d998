//! istio-iptables' arguments as `redirect istio-iptables` and `redirect vm` read them: our own
//! `--netns` / `--cluster-env` found first (they decide whose files and environment the parse
//! sees), then the whole parse.
use std::collections::HashMap;

use anyhow::Context as _;
use redirect_datapath::{pod_file_sources, resolve_netns, vm_file_sources};
use redirect_policy::{self as policy, Invocation};

/// Finds our own `--netns` / `--cluster-env` values before the full parse (they decide whose
/// files and which environment that parse sees): the last one given, as the parse takes it.
pub(crate) fn pre_scan(args: &[String], flag: &str) -> Option<String> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            found = it.next().cloned().or(found);
        } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(v.to_owned());
        }
    }
    found
}

/// Parses istio-iptables arguments the way `redirect istio-iptables` does: cluster.env under
/// the environment, and names and DNS servers from the target namespace's own files
/// ([`redirect_datapath::pod_file_sources`]; this process's own `/etc` only when the target
/// is the namespace it runs in). `vm`: the target is a VM (`redirect vm`), whose files are
/// this host's own ([`vm_file_sources`]), not a pod's.
pub(crate) fn parse_for(args: &[String], vm: bool) -> anyhow::Result<Invocation> {
    let netns = pre_scan(args, "--netns")
        .or_else(|| pre_scan(args, "--network-namespace"))
        .or_else(|| std::env::var("NETWORK_NAMESPACE").ok())
        .filter(|n| !n.is_empty());
    let path = resolve_netns(netns.as_deref());
    let sys = if vm {
        vm_file_sources(&path, netns.as_deref())
    } else {
        pod_file_sources(&path, netns.as_deref())
    };
    let cluster = match pre_scan(args, "--cluster-env") {
        Some(file) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("--cluster-env: reading {file}"))?;
            policy::parse_cluster_env(&text).with_context(|| format!("--cluster-env {file}"))?
        }
        None => HashMap::new(),
    };
    // The process environment over the cluster.env.
    let env = policy::LayeredEnv(policy::std_env(), cluster);
    Ok(policy::parse_invocation(args, &env, &sys)?)
}
