//! `attach --inbound NETNS[:b=..][:d=..][:z=..][:e=..][:no-listener=..]`: random specs,
//! each key with a hostile value, and any valid spec printed and parsed back.
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use redirect_policy::{
    InboundSpec, InboundSpecPorts as InboundPorts, NoListener,
    DEFAULT_INBOUND_EXCLUDE as DEFAULT_EXCLUDE,
};
use redirect_testkit::fuzz::{self, assert_names};

const KEYS: [&str; 5] = ["b", "d", "z", "e", "no-listener"];

fn spec_port_ok(v: &str) -> bool {
    v.trim()
        .parse::<u32>()
        .is_ok_and(|p| (1..=65535).contains(&p))
}

fn spec_ports_ok(v: &str) -> bool {
    v.split(',')
        .filter(|p| !p.trim().is_empty())
        .all(spec_port_ok)
}

fn accepted(key: &str, v: &str) -> bool {
    match key {
        "b" => matches!(v.trim(), "*" | "") || spec_ports_ok(v),
        "d" => spec_ports_ok(v),
        "z" | "e" => spec_port_ok(v),
        _ => matches!(v, "refuse" | "passthrough"),
    }
}

fn list(v: &[u16]) -> String {
    v.iter().map(u16::to_string).collect::<Vec<_>>().join(",")
}

/// `s` as `--inbound` takes it.
fn print(s: &InboundSpec) -> String {
    let b = match &s.ports {
        InboundPorts::All => "*".to_owned(),
        InboundPorts::None => String::new(),
        InboundPorts::List(l) => list(l),
    };
    let nl = match s.no_listener {
        NoListener::Refuse => "refuse",
        NoListener::Passthrough => "passthrough",
    };
    format!(
        "{}:b={b}:d={}:z={}:e={}:no-listener={nl}",
        s.netns.display(),
        list(&s.exclude),
        s.inbound_port,
        s.tunnel_port
    )
}

fn valid_spec() -> impl Strategy<Value = InboundSpec> {
    let port = 1..=u16::MAX;
    let ports = proptest::collection::vec(port.clone(), 1..4);
    (
        prop_oneof![
            "[a-z0-9_-]{1,12}".prop_map(|n| Path::new("/run/netns").join(n)),
            "/[a-z0-9/]{1,20}".prop_map(PathBuf::from)
        ],
        prop_oneof![
            Just(InboundPorts::All),
            Just(InboundPorts::None),
            ports.clone().prop_map(InboundPorts::List)
        ],
        proptest::collection::vec(port.clone(), 0..4),
        port.clone(),
        port,
        any::<bool>(),
    )
        .prop_map(
            |(netns, ports, exclude, inbound_port, tunnel_port, pass)| InboundSpec {
                netns,
                ports,
                exclude,
                inbound_port,
                tunnel_port,
                no_listener: if pass {
                    NoListener::Passthrough
                } else {
                    NoListener::Refuse
                },
                tproxy: false,
            },
        )
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_specs_never_panic(s in prop_oneof![
        fuzz::junk(40),
        proptest::collection::vec(
            prop_oneof![fuzz::value(),
                (proptest::sample::select(&KEYS[..]), fuzz::value()).prop_map(|(k, v)| format!("{k}={v}"))],
            0..5,
        ).prop_map(|p| p.join(":")),
    ]) {
        if let Err(e) = s.parse::<InboundSpec>() {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn a_bare_name_is_a_file_of_run_netns(
        name in prop_oneof![fuzz::junk(12), proptest::sample::select(fuzz::TRICKY).prop_map(str::to_owned)]
            .prop_map(|n| n.replace(['/', ':'], "")),
    ) {
        if name.trim().is_empty() {
            return Ok(());
        }
        if let Ok(spec) = name.parse::<InboundSpec>() {
            prop_assert_eq!(spec.netns.parent(), Some(Path::new("/run/netns")), "{:?}", spec.netns);
            prop_assert_eq!(spec.netns.file_name().and_then(|f| f.to_str()), Some(name.trim()));
        }
    }

    #[test]
    fn each_key_with_a_hostile_value_is_named(
        key in proptest::sample::select(&KEYS[..]),
        value in fuzz::value().prop_filter("one part", |v| !v.contains(':')),
    ) {
        let result = format!("pod:{key}={value}").parse::<InboundSpec>();
        prop_assert_eq!(result.is_ok(), accepted(key, &value), "{:?}", result);
        if let Err(e) = result {
            prop_assert!(e.starts_with(&format!("{key}: ")), "{}", e);
            // As written, or trimmed as the spec reads it.
            let named = value.split(',').any(|item| fuzz::names(&e, item) || fuzz::names(&e, item.trim()));
            prop_assert!(named, "{}", e);
        }
    }

    #[test]
    fn unknown_keys_and_parts_without_a_value_are_named(part in "[a-zA-Z0-9 ._=-]{1,16}") {
        let known = part.split_once('=').is_some_and(|(k, _)| KEYS.contains(&k));
        prop_assume!(!known);
        let e = format!("pod:{part}").parse::<InboundSpec>().expect_err("refused");
        let shown = part.split_once('=').map_or(part.as_str(), |(k, _)| k);
        assert_names(&e, shown);
    }

    #[test]
    fn a_printed_spec_parses_back(spec in valid_spec()) {
        let text = print(&spec);
        prop_assert_eq!(text.parse::<InboundSpec>(), Ok(spec), "{}", text);
    }

    #[test]
    fn defaults_fill_what_is_not_given(name in "[a-z0-9_-]{1,12}") {
        let spec: InboundSpec = name.parse().expect("a bare name");
        prop_assert_eq!(spec.exclude, DEFAULT_EXCLUDE.to_vec());
        prop_assert_eq!((spec.inbound_port, spec.tunnel_port), (15006, 15008));
    }
}
