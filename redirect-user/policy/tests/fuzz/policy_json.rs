//! Policy JSON (`enroll --policy FILE`, the daemon's requests and enrollment files): random
//! bytes, random JSON shapes, a valid policy with one field replaced or removed, and valid
//! policies round-tripped. Every refusal names the field.
use proptest::prelude::*;
use redirect_policy::{policy_from_json, policy_from_value, PolicyError};
use redirect_testkit::fuzz;
use serde_json::Value;

use crate::policies;

/// Any JSON value, a few levels deep.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (0u32..70_000).prop_map(Value::from),
        fuzz::value().prop_map(Value::String),
        proptest::sample::select(
            &[
                "All",
                "List",
                "Include",
                "Exclude",
                "Redirect",
                "Tproxy",
                "Refuse",
                "Passthrough"
            ][..]
        )
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(fuzz::junk(6), inner.clone(), 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            (
                proptest::sample::select(&["All", "List", "Include", "Exclude"][..]),
                inner
            )
                .prop_map(|(k, v)| Value::Object([(k.to_owned(), v)].into_iter().collect())),
        ]
    })
}

fn refusal_names(e: &PolicyError, field: &str) -> bool {
    let msg = e.to_string();
    msg.starts_with("policy") && msg.contains(field)
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_bytes_never_panic(bytes in fuzz::bytes(256)) {
        if let Err(e) = policy_from_json(&bytes) {
            prop_assert!(e.to_string().starts_with("policy"), "{}", e);
        }
    }

    #[test]
    fn random_json_shapes_never_panic(value in json()) {
        if let Err(e) = policy_from_value(&value) {
            prop_assert!(e.to_string().starts_with("policy"), "{}", e);
        }
    }

    #[test]
    fn one_field_replaced_is_named(
        policy in policies::valid(),
        which in any::<proptest::sample::Index>(),
        replacement in json(),
    ) {
        let Value::Object(mut obj) = serde_json::to_value(&policy).expect("serializes") else {
            unreachable!("a policy is an object")
        };
        let field = obj.keys().nth(which.index(obj.len())).expect("a field").clone();
        obj.insert(field.clone(), replacement);
        let text = serde_json::to_vec(&Value::Object(obj)).expect("serializes");
        if let Err(e) = policy_from_json(&text) {
            prop_assert!(refusal_names(&e, &field), "{}", e);
        }
    }

    #[test]
    fn one_field_removed_is_named(policy in policies::valid(), which in any::<proptest::sample::Index>()) {
        let Value::Object(mut obj) = serde_json::to_value(&policy).expect("serializes") else {
            unreachable!("a policy is an object")
        };
        let field = obj.keys().nth(which.index(obj.len())).expect("a field").clone();
        obj.remove(&field);
        let text = serde_json::to_vec(&Value::Object(obj)).expect("serializes");
        match policy_from_json(&text) {
            // The two fields of ours default when absent.
            Ok(_) => prop_assert!(field == "proxy_cgroup" || field == "no_proxy", "{}", field),
            Err(e) => prop_assert!(refusal_names(&e, &field), "{}", e),
        }
    }

    #[test]
    fn truncated_json_is_refused(policy in policies::valid(), cut in any::<proptest::sample::Index>()) {
        let text = serde_json::to_vec(&policy).expect("serializes");
        let cut = cut.index(text.len());
        let e = policy_from_json(&text[..cut]).expect_err("truncated");
        prop_assert!(e.to_string().contains("EOF"), "{}", e);
    }

    #[test]
    fn valid_policies_round_trip(policy in policies::valid()) {
        let text = serde_json::to_vec_pretty(&policy).expect("serializes");
        prop_assert_eq!(policy_from_json(&text).map_err(|e| e.to_string()), Ok(policy));
    }
}
