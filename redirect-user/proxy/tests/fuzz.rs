//! Property tests ("fuzz" target) of the proxy's registry file: random bytes, random JSON,
//! a valid file with one field replaced, hostile addresses, valid files round-tripped and
//! routed. Bounded; `PROPTEST_CASES=100000 cargo test -p redirect-proxy --test fuzz` runs longer.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::error::Error as _;
use std::net::{IpAddr, SocketAddr};

use proptest::prelude::*;
use redirect_proxy::{OutboundTrafficPolicy, Registry, RegistryError, RegistryFile, Service};
use redirect_testkit::fuzz::{self, assert_names};
use serde_json::Value;

fn ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u16; 8]>().prop_map(IpAddr::from)
    ]
}

fn service() -> impl Strategy<Value = Service> {
    let address = prop_oneof![
        ip().prop_map(|a| a.to_string()),
        (any::<[u8; 4]>(), 0u8..=32).prop_map(|(o, p)| format!("{}/{p}", IpAddr::from(o))),
    ];
    (
        fuzz::junk(12),
        proptest::collection::vec(address, 0..3),
        proptest::collection::vec(1..=u16::MAX, 1..3),
        proptest::collection::vec((ip(), 1..=u16::MAX).prop_map(SocketAddr::from), 0..3),
    )
        .prop_map(|(name, addresses, ports, endpoints)| Service {
            name,
            addresses,
            ports,
            endpoints,
        })
}

fn file() -> impl Strategy<Value = RegistryFile> {
    (any::<bool>(), proptest::collection::vec(service(), 0..4)).prop_map(|(only, services)| {
        RegistryFile {
            outbound_traffic_policy: if only {
                OutboundTrafficPolicy::RegistryOnly
            } else {
                OutboundTrafficPolicy::AllowAny
            },
            services,
        }
    })
}

fn json() -> impl Strategy<Value = Value> {
    fuzz::json(&["ALLOW_ANY", "REGISTRY_ONLY", "10.0.0.1:80"], &[])
}

/// The error and its sources, as `{:#}` shows them.
fn chain(e: &RegistryError) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(&format!(": {s}"));
        source = s.source();
    }
    text
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_text_never_panics(
        text in prop_oneof![fuzz::junk(200), json().prop_map(|v| v.to_string())],
    ) {
        match RegistryFile::parse("reg.json", &text) {
            Ok(file) => {
                let _ = Registry::from_file_contents(file);
            }
            Err(e) => {
                let text = chain(&e);
                prop_assert!(text.starts_with("parsing registry file reg.json at "), "{}", text);
            }
        }
    }

    #[test]
    fn one_field_replaced_is_named(
        f in file().prop_filter("a service", |f| !f.services.is_empty()),
        which in any::<proptest::sample::Index>(),
        field in proptest::sample::select(&["name", "addresses", "ports", "endpoints"][..]),
        replacement in json(),
    ) {
        let mut v = serde_json::to_value(&f).expect("serializes");
        let i = which.index(f.services.len());
        v["services"][i][field] = replacement;
        if let Err(e) = RegistryFile::parse("reg.json", &v.to_string()) {
            let text = chain(&e);
            prop_assert!(text.contains(&format!("services[{i}].{field}")), "{}", text);
        }
    }

    #[test]
    fn hostile_addresses_are_named_with_their_service(
        name in "[a-z.]{1,12}",
        address in fuzz::value(),
    ) {
        let file = RegistryFile {
            services: vec![Service {
                name: name.clone(),
                addresses: vec![address.clone()],
                ports: vec![80],
                endpoints: vec![],
            }],
            ..RegistryFile::default()
        };
        if let Err(e) = Registry::from_file_contents(file) {
            let text = e.to_string();
            prop_assert!(text.contains(&format!("service {name}")), "{}", text);
            assert_names(&text, &address);
        }
    }

    #[test]
    fn valid_files_round_trip_and_route_anything(
        f in file(),
        dst in (ip(), any::<u16>()).prop_map(SocketAddr::from),
    ) {
        let text = serde_json::to_string_pretty(&f).expect("serializes");
        let back = RegistryFile::parse("reg.json", &text).map_err(|e| chain(&e));
        prop_assert_eq!(back, Ok(f.clone()));
        let registry = Registry::from_file_contents(f).expect("valid");
        let _ = registry.route(dst);
        let _ = registry.route(dst);
    }
}
