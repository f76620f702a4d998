//! The integration tests, one binary (aya's integration-test way): a module per area, each
//! loading the real programs into cgroups and network namespaces of its own and sending real
//! TCP through them. Every privileged test opens with `privileged!()`: skipped (naming the
//! test's path) without root, a failure with `CI=true`.
mod adoption;
mod cli_errors;
mod cni;
mod conformance;
mod cri;
mod daemon;
mod daemon_protocol;
mod deploy;
mod dual_stack_pods;
mod explain_inbound;
mod flooding;
mod getsockopt;
mod hostile_netlink;
mod http_limits;
mod image;
mod inbound;
mod install_cni;
mod istio_iptables;
mod istio_iptables_env;
mod layout;
mod lifecycle;
mod local_quota;
mod lookup_key;
mod netns_once;
mod netns_return;
mod observe;
mod outbound;
mod ownership;
mod parity;
mod pod_files;
mod pod_policy;
mod policy_replace;
mod port_tries;
mod probe_fallback;
mod proxy;
mod quotas;
mod reconcile;
mod routes;
mod spoofed_sources;
mod stock_conflists;
mod tenancy;
mod upgrade;
mod validate;
mod vm;
