//! The environment istio-iptables reads and cluster.env files: hostile values for every
//! variable, random files, and cluster.env printed in every quoting style and read back.
use std::collections::HashMap;

use proptest::prelude::*;
use redirect_policy::{parse_cluster_env, PolicyError};
use redirect_testkit::fuzz::{self, assert_names};

use crate::support::{items, run, FLAGS, OTHER_ENV};

fn groups_ok(v: &str) -> bool {
    let list = items(v);
    list.len() <= redirect_policy::MAX_OWNER_IDS
        && list.iter().all(|g| {
            matches!(*g, "java" | "ftp")
                || (g.bytes().all(|b| b.is_ascii_digit()) && g.parse::<u32>().is_ok())
        })
}

fn loopback_ok(v: &str) -> bool {
    v.parse::<ipnet::Ipv4Net>()
        .is_ok_and(|n| n.addr().is_loopback() && (8..=32).contains(&n.prefix_len()))
}

/// One `KEY=value` line in a style chosen by `style`, as `istioctl` (or a person) writes it.
fn line(key: &str, value: &str, style: u8, export: bool) -> String {
    let value = match style % 3 {
        0 if !value.contains('\'') => format!("'{value}'"),
        1 | 0 => format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\"")),
        _ => value.to_owned(),
    };
    format!("{}{key}={value}", if export { "export " } else { "" })
}

/// Whether a value (without line breaks) survives `style`: unquoted ones must not hold
/// quotes or surrounding whitespace.
fn printable(value: &str, style: u8) -> bool {
    style % 3 != 2 || (!value.contains(['\'', '"']) && value.trim() == value)
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn every_variable_with_a_hostile_value_is_named(
        var in proptest::sample::select(
            FLAGS.iter().filter_map(|f| f.env).chain(OTHER_ENV.iter().copied()).collect::<Vec<_>>()
        ),
        value in fuzz::value(),
    ) {
        let env = HashMap::from([(var.to_owned(), value.clone())]);
        let result = run(&[], &env);
        match var {
            "ISTIO_OUTBOUND_OWNER_GROUPS" => {
                prop_assert_eq!(result.is_ok(), value == "*" || groups_ok(&value), "{:?}", result);
            }
            "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE" => {
                prop_assert_eq!(result.is_ok(), groups_ok(&value), "{:?}", result);
            }
            "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR" => {
                prop_assert_eq!(result.is_ok(), loopback_ok(&value), "{:?}", result);
            }
            _ => {}
        }
        if let Err(e) = result {
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("${var}")), "{}", msg);
            let PolicyError::Invalid { value: bad, .. } = &e else {
                return Err(TestCaseError::fail(format!("not an Invalid: {msg}")));
            };
            prop_assert!(value.contains(bad.as_str()), "{}", msg);
            assert_names(&msg, bad);
        }
    }

    #[test]
    fn random_cluster_env_never_panics_and_names_the_line(
        text in prop_oneof![
            fuzz::junk(200),
            proptest::collection::vec(
                prop_oneof![
                    fuzz::junk(20),
                    (fuzz::junk(6), fuzz::value()).prop_map(|(k, v)| format!("{k}={v}")),
                    ("[A-Z_]{1,8}", fuzz::value(), any::<u8>()).prop_map(|(k, v, s)| line(&k, &v, s, false)),
                ],
                0..8,
            ).prop_map(|l| l.join("\n")),
        ],
    ) {
        if let Err(e) = parse_cluster_env(&text) {
            let PolicyError::ClusterEnv { line, text: bad, .. } = &e else {
                return Err(TestCaseError::fail(format!("not a ClusterEnv error: {e}")));
            };
            let msg = e.to_string();
            prop_assert!(msg.contains(&format!("line {line}")), "{}", msg);
            prop_assert_eq!(text.lines().nth(line - 1), Some(bad.as_str()));
            assert_names(&msg, bad);
        }
    }

    #[test]
    fn cluster_env_printed_in_any_style_reads_back(
        vars in proptest::collection::btree_map("[A-Za-z_][A-Za-z0-9_]{0,12}", fuzz::junk(16), 0..8),
        styles in proptest::collection::vec((any::<u8>(), any::<bool>()), 8),
        comments in proptest::collection::vec(fuzz::junk(10), 0..3),
    ) {
        let mut lines: Vec<String> = comments
            .iter()
            .map(|c| format!("# {}", c.replace(['\n', '\r'], " ")))
            .collect();
        let mut want = HashMap::new();
        for ((k, v), (style, export)) in vars.iter().zip(&styles) {
            let v = v.replace(['\n', '\r'], "");
            let style = if printable(&v, *style) { *style } else { 1 };
            lines.push(line(k, &v, style, *export));
            want.insert(k.clone(), v);
        }
        let text = lines.join("\n");
        prop_assert_eq!(parse_cluster_env(&text).map_err(|e| e.to_string()), Ok(want), "{}", text);
    }
}
