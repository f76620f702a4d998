//! istio-iptables arguments: random argv, one flag with a hostile value in every form
//! (`-pV`, `-p V`, `-p=V`, `--long V`, `--long=V`, `$ENV`), truncated, unknown and
//! positional arguments. Every refusal names the flag and the value.
use std::collections::HashMap;

use proptest::prelude::*;
use redirect_policy::PolicyError;
use redirect_testkit::fuzz::{self, assert_names};

use crate::support::{items, port_ok, run, Flag, Kind, FLAGS, IGNORED, OTHER_ENV};

/// How a value is given.
#[derive(Debug, Clone, Copy)]
enum Form {
    ShortAttached,
    ShortSeparate,
    ShortEquals,
    LongSeparate,
    LongEquals,
    Env,
}

const FORMS: [Form; 6] = [
    Form::ShortAttached,
    Form::ShortSeparate,
    Form::ShortEquals,
    Form::LongSeparate,
    Form::LongEquals,
    Form::Env,
];

/// `flag` given `value` in `form`, as (argv, env); `None` when the form does not exist for it.
fn given(flag: &Flag, form: Form, value: &str) -> Option<(Vec<String>, HashMap<String, String>)> {
    let bool_flag = flag.kind == Kind::Bool;
    let argv = |v: Vec<String>| Some((v, HashMap::new()));
    match (form, flag.short) {
        (Form::ShortAttached, Some(c))
            if !bool_flag && !value.is_empty() && !value.starts_with('=') =>
        {
            argv(vec![format!("-{c}{value}")])
        }
        (Form::ShortSeparate, Some(c)) if !bool_flag => argv(vec![format!("-{c}"), value.into()]),
        (Form::ShortEquals, Some(c)) => argv(vec![format!("-{c}={value}")]),
        (Form::LongSeparate, _) if !bool_flag => {
            argv(vec![format!("--{}", flag.long), value.into()])
        }
        (Form::LongEquals, _) => argv(vec![format!("--{}={value}", flag.long)]),
        (Form::Env, _) => flag.env.map(|e| {
            (
                Vec::new(),
                HashMap::from([(e.to_owned(), value.to_owned())]),
            )
        }),
        _ => None,
    }
}

fn ids_ok(v: &str) -> bool {
    let list = items(v);
    v.is_empty()
        || (!list.is_empty()
            && list.len() <= redirect_policy::MAX_OWNER_IDS
            && list
                .iter()
                .all(|i| i.bytes().all(|b| b.is_ascii_digit()) && i.parse::<u32>().is_ok()))
}

/// The kernel's `dev_valid_name`.
fn iface_ok(n: &str) -> bool {
    (1..=15).contains(&n.len())
        && n != "."
        && n != ".."
        && !n.contains(|c: char| c == '/' || c == ':' || c == '\0' || c.is_whitespace())
}

/// Whether istio-iptables (with our stricter checks) accepts `v` for a flag of `kind`.
fn accepted(kind: Kind, v: &str) -> bool {
    let all = |f: &dyn Fn(&str) -> bool| items(v).into_iter().all(f);
    match kind {
        Kind::Port => port_ok(v),
        Kind::Ports => all(&port_ok),
        Kind::PortsOrStar => v == "*" || all(&port_ok),
        Kind::Ids => ids_ok(v),
        Kind::Mode => matches!(v, "" | "REDIRECT" | "TPROXY"),
        Kind::NoProxy => matches!(v, "refuse" | "passthrough"),
        Kind::Bool => matches!(
            v,
            "1" | "t"
                | "T"
                | "true"
                | "TRUE"
                | "True"
                | "0"
                | "f"
                | "F"
                | "false"
                | "FALSE"
                | "False"
        ),
        Kind::Ifaces => all(&iface_ok),
        Kind::Cidrs => v == "*" || all(&|i| i.parse::<ipnet::IpNet>().is_ok()),
        Kind::CidrsNoStar => v != "*" && all(&|i| i.parse::<ipnet::IpNet>().is_ok()),
        Kind::Ips => all(&|i| i.parse::<std::net::IpAddr>().is_ok()),
        Kind::Free => true,
    }
}

/// Checks that a refusal of `args` under `env` names what it refuses.
fn check_named(err: &PolicyError, args: &[String], env: &HashMap<String, String>) {
    let msg = err.to_string();
    let given = |s: &str| args.iter().chain(env.values()).any(|a| a.contains(s));
    match err {
        PolicyError::Invalid { flag, value, .. } => {
            assert!(msg.contains(flag.as_str()), "{msg}");
            assert_names(&msg, value);
            assert!(given(value), "{value:?} was not given: {msg}");
        }
        PolicyError::UnknownFlag(f) => {
            let name = f.split(' ').next().unwrap_or_default();
            assert!(args.iter().any(|a| a.starts_with(name)), "{msg}");
        }
        PolicyError::MissingValue(label) => {
            let last = args.last().expect("a flag was last");
            assert!(label.contains(last.as_str()), "{msg}");
        }
        PolicyError::UnexpectedArgument(a) => {
            assert!(args.contains(a), "{msg}");
            assert_names(&msg, a);
        }
        other => panic!("unexpected refusal {other:?}"),
    }
}

fn any_flag() -> impl Strategy<Value = Flag> {
    proptest::sample::select(FLAGS)
}

/// One argv element: a flag in some form, a value, junk, or punctuation.
fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => any_flag().prop_map(|f| format!("--{}", f.long)),
        2 => any_flag().prop_filter_map("short", |f| f.short.map(|c| format!("-{c}"))),
        2 => (any_flag(), fuzz::value()).prop_map(|(f, v)| format!("--{}={v}", f.long)),
        1 => proptest::sample::select(IGNORED).prop_map(|(n, _)| format!("--{n}")),
        3 => fuzz::value(),
        1 => fuzz::junk(8).prop_map(|j| format!("--{j}")),
        1 => fuzz::junk(4).prop_map(|j| format!("-{j}")),
        1 => proptest::sample::select(&["--", "-", "istio-iptables", "--=", "-=", "---"][..]).prop_map(str::to_owned),
    ]
}

fn env_names() -> Vec<&'static str> {
    FLAGS
        .iter()
        .filter_map(|f| f.env)
        .chain(OTHER_ENV.iter().copied())
        .collect()
}

fn env() -> impl Strategy<Value = HashMap<String, String>> {
    proptest::collection::hash_map(
        proptest::sample::select(env_names()).prop_map(str::to_owned),
        fuzz::value(),
        0..4,
    )
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn random_argv_and_env_never_panic_and_refusals_are_named(
        args in proptest::collection::vec(arg(), 0..8),
        env in env(),
    ) {
        match run(&args, &env) {
            Err(e) => check_named(&e, &args, &env),
            // Whatever the parser lets through holds the invariants JSON policies are held to.
            Ok(inv) => prop_assert!(inv.policy.validate().is_ok(), "{:?}", inv.policy.validate()),
        }
    }

    #[test]
    fn one_flag_with_a_hostile_value_in_every_form(
        flag in any_flag(),
        form in proptest::sample::select(&FORMS[..]),
        value in fuzz::value(),
    ) {
        let Some((args, env)) = given(&flag, form, &value) else { return Ok(()) };
        let result = run(&args, &env);
        prop_assert_eq!(result.is_ok(), accepted(flag.kind, &value), "{:?} {:?}: {:?}", args, env, result);
        if let Err(e) = result {
            let msg = e.to_string();
            prop_assert!(msg.contains(&flag.label()), "{}", msg);
            if let Some(var) = flag.env.filter(|_| matches!(form, Form::Env)) {
                prop_assert!(msg.contains(&format!("${var}")), "{}", msg);
            }
            check_named(&e, &args, &env);
        }
    }

    #[test]
    fn a_value_flag_given_last_without_its_value_is_named(
        flag in any_flag().prop_filter("takes a value", |f| f.kind != Kind::Bool),
        long in any::<bool>(),
        before in proptest::collection::vec(
            (any_flag(), fuzz::value()).prop_map(|(f, v)| format!("--{}={v}", f.long)),
            0..3,
        ),
    ) {
        let last = match (long, flag.short) {
            (false, Some(c)) => format!("-{c}"),
            _ => format!("--{}", flag.long),
        };
        let mut args = before;
        args.push(last);
        match run(&args, &HashMap::new()) {
            Err(PolicyError::MissingValue(label)) => prop_assert_eq!(label, flag.label()),
            other => prop_assert!(false, "{:?}: {:?}", args, other),
        }
    }

    #[test]
    fn unknown_flags_and_positional_arguments_are_named(
        name in "[a-zA-Z0-9_-]{1,20}",
        value in fuzz::value(),
        positional in any::<bool>(),
    ) {
        let known = FLAGS.iter().any(|f| f.long == name) || IGNORED.iter().any(|(n, _)| *n == name);
        prop_assume!(!known && !name.starts_with('-') && name != "istio-iptables");
        let arg = if positional { name.clone() } else { format!("--{name}={value}") };
        let args = vec![arg];
        let e = run(&args, &HashMap::new()).expect_err("refused");
        let msg = e.to_string();
        prop_assert!(msg.contains(&name), "{}", msg);
        let named = matches!(e, PolicyError::UnexpectedArgument(_) | PolicyError::UnknownFlag(_));
        prop_assert!(named, "{}", msg);
    }
}
