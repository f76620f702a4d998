//! Property tests ("fuzz" target) of the `redirect` command line's value parsers, its
//! `--istio-args` splitting and `--netns`/`--cluster-env` pre-scan, and the whole CLI on
//! random argv (non-UTF-8 included). Bounded; `PROPTEST_CASES=100000 cargo test -p
//! redirect-cli fuzz` runs longer.
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;

use crate::cli_values::non_utf8_argument;
use clap::Parser as _;
use proptest::prelude::*;
use redirect_testkit::fuzz::{self, assert_names};

use crate::cli::Cli;
use crate::cli_values::{parse_bpf_log, parse_cidr, parse_id, parse_inbound, parse_port};

const SUBCOMMANDS: &[&str] = &[
    "attach",
    "exec",
    "istio-iptables",
    "daemon",
    "enroll",
    "unenroll",
    "list",
    "uninstall",
    "validate",
    "vm",
    "stats",
    "trace",
    "explain",
    "status",
    "probe",
];

const CLI_FLAGS: &[&str] = &[
    "--cgroup",
    "--proxy-cgroup",
    "--proxy-uid",
    "--proxy-gid",
    "--outbound-port",
    "--bpf-log",
    "--inbound",
    "--netns",
    "--istio-args",
    "--policy",
    "--cluster-env",
    "--json",
    "--bpffs",
    "--timeout-ms",
    "--daemon-dir",
    "--state-dir",
];

fn os_arg() -> impl Strategy<Value = OsString> {
    prop_oneof![
        2 => proptest::sample::select(CLI_FLAGS).prop_map(OsString::from),
        2 => fuzz::value().prop_map(OsString::from),
        1 => fuzz::bytes(8).prop_map(OsString::from_vec),
    ]
}

proptest! {
    #![proptest_config(fuzz::config(256))]

    #[test]
    fn ports_are_1_to_65535_and_refusals_name_the_value(s in fuzz::value()) {
        let want = s.trim().parse::<u64>().ok().filter(|n| (1..=65535).contains(n));
        match parse_port(&s) {
            Ok(p) => prop_assert_eq!(Some(u64::from(p)), want),
            Err(e) => {
                prop_assert_eq!(want, None);
                assert_names(&e, &s);
            }
        }
    }

    #[test]
    fn other_values_name_what_they_refuse(s in fuzz::value()) {
        if let Err(e) = parse_id(&s) {
            assert_names(&e, &s);
        }
        if let Err(e) = parse_bpf_log(&s) {
            assert_names(&e, &s);
        }
        if let Err(e) = parse_cidr(&s) {
            assert_names(&e, s.trim());
        }
    }

    #[test]
    fn inbound_specs_of_missing_namespaces_name_the_path(name in "[a-z0-9]{1,12}", rest in fuzz::value()) {
        let spec = format!("/nonexistent-{name}:{rest}");
        if let Err(e) = parse_inbound(&spec) {
            prop_assert!(!e.is_empty());
        }
        let e = parse_inbound(&format!("/nonexistent-{name}")).expect_err("no such namespace");
        prop_assert!(e.contains(&format!("/nonexistent-{name}")), "{}", e);
    }

    #[test]
    fn istio_args_split_back_into_the_words_quoted(words in proptest::collection::vec(fuzz::junk(10), 0..6)) {
        // A shell word cannot hold NUL.
        let words: Vec<String> = words.into_iter().filter(|w| !w.contains('\0')).collect();
        let line = shlex::try_join(words.iter().map(String::as_str)).expect("no NUL");
        prop_assert_eq!(crate::node_cmds::split_args(&line).map_err(|e| e.to_string()), Ok(words), "{:?}", line);
    }

    #[test]
    fn unterminated_quotes_are_named(s in fuzz::junk(20), q in proptest::sample::select(&['\'', '"'][..])) {
        // Without quotes, escapes or comments of its own, the one quote is left open.
        let s = s.replace(['\'', '"', '\\', '#'], "");
        let line = format!("{s}{q}{s}");
        let e = crate::node_cmds::split_args(&line).expect_err("unterminated").to_string();
        prop_assert!(e.contains("unterminated quote") && e.contains(&format!("{line:?}")), "{}", e);
    }

    #[test]
    fn pre_scan_finds_the_value_the_parser_uses(
        first in fuzz::value(),
        last in fuzz::value(),
        equals in any::<[bool; 2]>(),
        between in proptest::collection::vec("-[a-z]=[0-9]{0,3}", 0..3),
    ) {
        let given = |v: &str, eq: bool| {
            if eq { vec![format!("--netns={v}")] } else { vec!["--netns".into(), v.to_owned()] }
        };
        let argv: Vec<String> = given(&first, equals[0])
            .into_iter()
            .chain(between)
            .chain(given(&last, equals[1]))
            .collect();
        let sources = redirect_policy::Sources::new("fuzz", vec![Box::new(redirect_policy::OwnFiles)]);
        let parsed = redirect_policy::parse_invocation(&argv, &std::collections::HashMap::new(), &sources);
        prop_assert_eq!(crate::istio_args::pre_scan(&argv, "--netns"), Some(last.clone()));
        if let Ok(inv) = parsed {
            prop_assert_eq!(inv.netns, Some(last));
        }
    }

    #[test]
    fn the_whole_command_line_never_panics(
        sub in proptest::sample::select(SUBCOMMANDS),
        args in proptest::collection::vec(os_arg(), 0..6),
    ) {
        let argv: Vec<OsString> = [OsString::from("redirect"), OsString::from(sub)].into_iter().chain(args).collect();
        match Cli::try_parse_from(&argv) {
            Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
                // What main prints instead of clap's message: the argument, by position.
                let i = argv.iter().position(|a| a.to_str().is_none()).expect("a non-UTF-8 argument");
                let named = crate::cli_values::non_utf8_argument(argv.clone());
                prop_assert!(named.starts_with(&format!("argument {i} ")), "{}", named);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
            Ok(_) => {}
        }
    }
}

/// `--netns a ... --netns b` applied to `b` but read `a`'s resolv.conf (and `--cluster-env`
/// likewise read the first file while the policy recorded the last).
#[test]
fn pre_scan_takes_the_last_value_like_the_parser() {
    let argv: Vec<String> = [
        "--netns",
        "a",
        "--cluster-env=f1",
        "--netns=b",
        "--cluster-env",
        "f2",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(
        crate::istio_args::pre_scan(&argv, "--netns").as_deref(),
        Some("b")
    );
    assert_eq!(
        crate::istio_args::pre_scan(&argv, "--cluster-env").as_deref(),
        Some("f2")
    );
}

/// `parse_port("00")` said "port 0 cannot be connected to", not naming `00` as written.
#[test]
fn port_refusals_name_the_value_as_written() {
    for s in ["00", "0070000", " 0"] {
        let e = parse_port(s).expect_err(s);
        assert!(e.contains(&format!("'{s}'")), "{e}");
    }
}

/// clap said "invalid UTF-8 was detected in one or more arguments", naming none.
#[test]
fn a_non_utf8_argument_is_named_with_its_flag() {
    let argv = ["redirect", "enroll", "--netns"]
        .map(OsString::from)
        .into_iter()
        .chain([OsString::from_vec(b"pod\xff".to_vec())]);
    let e = non_utf8_argument(argv);
    assert_eq!(
        e,
        "argument 3 \"pod\u{fffd}\" (the value of --netns) is not UTF-8: give it as text"
    );
}
