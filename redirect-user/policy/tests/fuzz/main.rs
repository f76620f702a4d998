//! Property tests ("fuzz" targets) of every redirect-policy parser of outside input:
//! istio-iptables arguments, their environment, cluster.env, `--inbound` specs and policy
//! JSON. Bounded by default; `PROPTEST_CASES=100000 cargo test -p redirect-policy --test fuzz`
//! runs longer.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
mod args;
mod env;
mod inbound_spec;
mod policies;
mod policy_json;
mod roundtrip;
mod support;
