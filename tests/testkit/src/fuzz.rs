//! Shared pieces of the parsers' property tests: a bounded proptest config that honours
//! `PROPTEST_CASES`, generators of hostile text, and the "error names the value" check.
use proptest::prelude::*;
use proptest::test_runner::Config;

/// `cases` cases per property (kept small so `cargo xtask test` stays fast), or
/// `PROPTEST_CASES` when set for a longer run. No regression files are written into the
/// source tree: a failure found here is kept as an ordinary unit test instead.
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Values that break naive parsers: empty, signs, radix prefixes, huge numbers, separators,
/// quotes, NUL, non-ASCII digits and whitespace.
pub const TRICKY: &[&str] = &[
    "",
    " ",
    "*",
    "**",
    ",",
    ",,",
    "0",
    "00",
    "-0",
    "-1",
    "+1",
    "0x50",
    "1e3",
    "65535",
    "65536",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999999999999999999999",
    "1,,2",
    " 80",
    "80 ",
    "８０",
    "١٢",
    "\u{0}",
    "a\u{0}b",
    "\t",
    "\n",
    "'",
    "\"",
    "\\",
    "=",
    ":",
    "::",
    "/",
    "..",
    "%",
    "10.0.0.0/33",
    "10.0.0.256/8",
    "::1/129",
    "fe80::1%eth0",
    "1.2.3.4",
    "1.2.3.4/",
    "/8",
    "true",
    "maybe",
    "REDIRECT",
    "tproxy",
    "eth0",
    "a-very-long-interface-name",
    "ü",
    "\u{200b}",
    "\u{fffd}",
    "🦀",
];

/// Any `char` sequence up to `max` chars (control characters, surrogates' replacements,
/// astral planes included).
pub fn junk(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..=max).prop_map(|c| c.into_iter().collect())
}

/// A hostile value: a tricky literal, junk, a number of any size, or a comma list of those.
pub fn value() -> impl Strategy<Value = String> {
    let atom = prop_oneof![
        3 => proptest::sample::select(TRICKY).prop_map(str::to_owned),
        2 => junk(12),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => (0u32..=70_000).prop_map(|n| n.to_string()),
    ];
    prop_oneof![
        3 => atom.clone(),
        1 => proptest::collection::vec(atom, 0..5).prop_map(|v| v.join(",")),
    ]
}

/// Random JSON up to three levels deep: null, booleans, numbers, hostile strings and the
/// domain's own `words` as leaves; arrays and objects whose keys are junk or one of `keys`
/// (the field names a decoder looks for).
pub fn json(
    words: &'static [&'static str],
    keys: &'static [&'static str],
) -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        value().prop_map(Value::String),
        proptest::sample::select(words).prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, move |inner| {
        let key = if keys.is_empty() {
            junk(6).boxed()
        } else {
            prop_oneof![
                junk(6),
                proptest::sample::select(keys).prop_map(str::to_owned)
            ]
            .boxed()
        };
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(key, inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Raw bytes up to `max` long, often not UTF-8.
pub fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=max)
}

/// Whether `message` names `token`: as written, or as `{:?}` would escape it.
pub fn names(message: &str, token: &str) -> bool {
    let debug = format!("{token:?}");
    message.contains(token) || message.contains(&debug[1..debug.len() - 1])
}

/// Panics (failing the property) unless `message` names `token`.
pub fn assert_names(message: &str, token: &str) {
    assert!(
        names(message, token),
        "the error does not name {token:?}: {message}"
    );
}
