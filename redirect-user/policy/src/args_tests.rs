//! Tests of istio-iptables argument and env parsing: syntax, precedence, defaults.

use std::{collections::HashMap, time::Duration};

use super::test_support::*;
use super::*;

/// The istio-init command line of inject/hello.yaml.injected (argv0 included).
fn hello_init_args() -> Vec<String> {
    let manifest = redirect_testkit::reference::inject("hello.yaml");
    std::iter::once("istio-iptables".to_owned())
        .chain(redirect_testkit::reference::istio_init_args(&manifest))
        .collect()
}

#[test]
fn hello_injected_istio_init_args() {
    let args = hello_init_args();
    assert_eq!(args[0], "istio-iptables");
    assert!(args.iter().any(|a| a.is_empty()), "-x \"\" is in {args:?}");
    let inv = parse_invocation(&args, &HashMap::new(), &Stub::default()).unwrap();
    let p = &inv.policy;
    assert_eq!(
        (p.proxy_port, p.inbound_capture_port, p.tunnel_port),
        (15001, 15006, 15008)
    );
    assert_eq!(
        (p.proxy_uids.clone(), p.proxy_gids.clone()),
        (vec![1337], vec![1337])
    );
    assert_eq!(p.mode, Mode::Redirect);
    assert_eq!(p.include_cidrs, Cidrs::All);
    assert!(p.exclude_cidrs.is_empty());
    assert_eq!(p.inbound_ports, InboundPorts::All);
    assert_eq!(p.inbound_exclude_ports, vec![15090, 15021, 15020]);
    assert_eq!(
        inv.ignored,
        vec!["--log_output_level=default:info".to_string()]
    );
    assert!(!inv.dry_run && !inv.cleanup_only && inv.netns.is_none());
}

#[test]
fn pflag_value_forms() {
    for args in [
        &["-p", "15101"][..],
        &["-p=15101"],
        &["-p15101"],
        &["--envoy-port", "15101"],
        &["--envoy-port=15101"],
        &["istio-iptables", "-p", "15101"],
        &["-p", "1", "-p", "15101"],
    ] {
        assert_eq!(policy(args, &[]).proxy_port, 15101, "{args:?}");
    }
    assert_eq!(policy(&["-x", ""], &[]).exclude_cidrs, vec![]);
    assert_eq!(policy(&["-i", ""], &[]).include_cidrs, Cidrs::List(vec![]));
    assert_eq!(
        policy(&["-b", ""], &[]).inbound_ports,
        InboundPorts::List(vec![])
    );
    assert_eq!(
        policy(&["-d", "6000,7000,"], &[]).inbound_exclude_ports,
        vec![6000, 7000]
    );
    assert_eq!(policy(&["-o", ",,80,,"], &[]).exclude_ports, vec![80]);
    assert_eq!(
        policy(&["-c", "eth1,eth2"], &[]).exclude_interfaces,
        vec!["eth1", "eth2"]
    );
    assert_eq!(policy(&["-m", "TPROXY"], &[]).mode, Mode::Tproxy);
    assert_eq!(policy(&["-m", "REDIRECT"], &[]).mode, Mode::Redirect);
}

#[test]
fn bool_flag_forms() {
    assert!(policy(&["--redirect-dns"], &[]).redirect_dns);
    assert!(policy(&["--redirect-dns=true"], &[]).redirect_dns);
    assert!(policy(&["--redirect-dns=1"], &[]).redirect_dns);
    assert!(!policy(&["--redirect-dns=false"], &[]).redirect_dns);
    assert!(policy(&["--drop-invalid", "--dual-stack"], &[]).drop_invalid);
    assert!(policy(&["--capture-all-dns"], &[]).capture_all_dns);
    let sys = Stub::default();
    assert!(run(&["-n"], &[], &sys).unwrap().dry_run);
    assert!(run(&["--dry-run=true"], &[], &sys).unwrap().dry_run);
    assert!(run(&["--skip-rule-apply"], &[], &sys).unwrap().dry_run);
    assert!(run(&["--cleanup-only"], &[], &sys).unwrap().cleanup_only);
    assert!(
        run(&["--run-validation"], &[], &sys)
            .unwrap()
            .run_validation
    );
    let e = error(&["--redirect-dns", "false"], &[]);
    assert!(e.contains("\"false\""), "{e}");
    let e = error(&["--redirect-dns=yes"], &[]);
    assert_eq!(e, "--redirect-dns: \"yes\" is not a bool (true or false)");
}

#[test]
fn tproxy_mark_and_table_other_than_istios_defaults_are_refused_naming_the_value() {
    let e = error(&["-m", "TPROXY", "-t", "1338"], &[]);
    assert!(
        e.starts_with("-t/--istio-inbound-tproxy-mark: \"1338\" is not Istio's default 1337"),
        "{e}"
    );
    let e = error(&["--istio-inbound-tproxy-route-table=200"], &[]);
    assert!(
        e.starts_with("-r/--istio-inbound-tproxy-route-table: \"200\" is not Istio's default 133"),
        "{e}"
    );
    assert!(run(&["-t", "1337", "-r", "133"], &[], &Stub::default()).is_ok());
}

#[test]
fn ours_and_ignored_flags() {
    let inv = run(
        &[
            "--netns",
            "pod1",
            "--cgroup",
            "/sys/fs/cgroup/p",
            "--bpffs=/sys/fs/bpf/r",
            "--cluster-env",
            "/var/lib/istio/envoy/cluster.env",
            "-t",
            "1337",
            "--istio-inbound-tproxy-route-table=133",
            "--log_as_json",
            "--reconcile",
            "--log_caller",
            "default",
        ],
        &[],
        &Stub::default(),
    )
    .unwrap();
    assert_eq!(inv.netns.as_deref(), Some("pod1"));
    assert_eq!(inv.cgroup, Some(PathBuf::from("/sys/fs/cgroup/p")));
    assert_eq!(inv.bpffs, Some(PathBuf::from("/sys/fs/bpf/r")));
    assert_eq!(
        inv.cluster_env,
        Some(PathBuf::from("/var/lib/istio/envoy/cluster.env"))
    );
    assert_eq!(
        inv.ignored,
        [
            "-t 1337",
            "--istio-inbound-tproxy-route-table=133",
            "--log_as_json",
            "--reconcile",
            "--log_caller default",
        ]
    );
    let inv = run(
        &["--network-namespace", "/var/run/netns/x"],
        &[],
        &Stub::default(),
    )
    .unwrap();
    assert_eq!(inv.netns.as_deref(), Some("/var/run/netns/x"));
}

#[test]
fn validation_probe_port_and_timeout() {
    let sys = Stub::default();
    let inv = run(&["--run-validation"], &[], &sys).unwrap();
    assert_eq!(
        (inv.probe_port, inv.probe_timeout),
        (15002, Duration::from_secs(5))
    );
    let inv = run(
        &["--iptables-probe-port", "16002", "--probe-timeout=1500ms"],
        &[],
        &sys,
    )
    .unwrap();
    assert_eq!(
        (inv.probe_port, inv.probe_timeout),
        (16002, Duration::from_millis(1500))
    );
    assert!(inv.ignored.is_empty(), "{:?}", inv.ignored);
    let env = [("IPTABLES_PROBE_PORT", "17002"), ("PROBE_TIMEOUT", "1m")];
    let inv = run(&[], &env, &sys).unwrap();
    assert_eq!(
        (inv.probe_port, inv.probe_timeout),
        (17002, Duration::from_secs(60))
    );
    assert_eq!(
        error(&["--probe-timeout", "5"], &[]),
        "--probe-timeout: \"5\" is not a duration (a number with a unit: 5s, 1500ms, 1m30s)"
    );
    let e = error(&[], &[("PROBE_TIMEOUT", "-1s")]);
    assert!(
        e.starts_with("--probe-timeout ($PROBE_TIMEOUT): \"-1s\""),
        "{e}"
    );
    let e = error(&["--iptables-probe-port=0"], &[]);
    assert!(
        e.starts_with("--iptables-probe-port: \"0\" is not a port"),
        "{e}"
    );
}

#[test]
fn env_precedence() {
    assert_eq!(policy(&[], &[("PROXY_UID", "5")]).proxy_uids, vec![5]);
    assert_eq!(policy(&[], &[("PROXY_UID", "5")]).proxy_gids, vec![5]);
    assert_eq!(
        policy(&["-u", "7"], &[("PROXY_UID", "5")]).proxy_uids,
        vec![7]
    );
    assert_eq!(
        policy(&[], &[("INBOUND_CAPTURE_PORT", "16006")]).inbound_capture_port,
        16006
    );
    assert_eq!(
        policy(&["-z", "17006"], &[("INBOUND_CAPTURE_PORT", "16006")]).inbound_capture_port,
        17006
    );
    // -p has no env binding (ENVOY_PORT is only logged by istio).
    assert_eq!(policy(&[], &[("ENVOY_PORT", "9999")]).proxy_port, 15001);
    // The alias beats the primary env; the CLI beats both.
    let both = [
        ("REDIRECT_DNS", "false"),
        ("ISTIO_META_DNS_CAPTURE", "true"),
    ];
    assert!(policy(&[], &both).redirect_dns);
    assert!(!policy(&["--redirect-dns=false"], &both).redirect_dns);
    assert!(policy(&[], &[("REDIRECT_DNS", "true")]).redirect_dns);
    assert!(policy(&[], &[("INVALID_DROP", "true"), ("DROP_INVALID", "false")]).drop_invalid);
    assert!(policy(&[], &[("ISTIO_DUAL_STACK", "true")]).dual_stack);
    // Set to "" really sets "".
    assert_eq!(
        policy(&["-i", "10.0.0.0/8"], &[]).include_cidrs,
        Cidrs::List(nets(&["10.0.0.0/8"]))
    );
    assert_eq!(
        policy(&[], &[("ISTIO_SERVICE_CIDR", "")]).include_cidrs,
        Cidrs::List(vec![])
    );
    assert_eq!(
        policy(&[], &[("ISTIO_SERVICE_CIDR", "*")]).include_cidrs,
        Cidrs::All
    );
    let e = error(&[], &[("INBOUND_CAPTURE_PORT", "")]);
    assert_eq!(
        e,
        "-z/--inbound-capture-port ($INBOUND_CAPTURE_PORT): \"\" is not a port (a number 1-65535)"
    );
}

#[test]
fn proxy_identity_defaults() {
    let mut sys = Stub::default();
    assert_eq!(run(&[], &[], &sys).unwrap().policy, Policy::default());
    sys.users.insert("istio-proxy".into(), 1234);
    sys.users.insert("envoy".into(), 101);
    let p = run(&[], &[], &sys).unwrap().policy;
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![1234], vec![1234]));
    let p = run(&["-u", ""], &[("ENVOY_USER", "envoy")], &sys)
        .unwrap()
        .policy;
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![101], vec![101]));
    let p = policy(&["-u", "3,4"], &[]);
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![3, 4], vec![3, 4]));
    let p = policy(&["-u", "3,4", "-g", "1,2"], &[]);
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![3, 4], vec![1, 2]));
    // Names, as iptables' --uid-owner/--gid-owner take them, from the pod's files.
    let p = run(&["-u", "envoy,7", "-g", "java"], &[], &sys)
        .unwrap()
        .policy;
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![101, 7], vec![1001]));
}

#[test]
fn nothing_is_looked_up_without_a_source_of_the_pods_files() {
    let none = Sources::new("/run/netns/empty", Vec::new());
    let parse = |args: &[&str], env: &[(&str, &str)]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        parse_invocation(&args, &env_of(env), &none).map(|i| i.policy)
    };
    // --cleanup-only applies no policy: nothing is looked up for it.
    let args: Vec<String> = ["--cleanup-only", "--redirect-dns", "-g", "java"]
        .map(String::from)
        .to_vec();
    assert!(parse_invocation(&args, &HashMap::new(), &none).is_ok());
    // Explicit values need no source.
    let p = parse(
        &[
            "-u",
            "1337",
            "--redirect-dns",
            "--dns-servers",
            "10.96.0.10",
        ],
        &[("ISTIO_OUTBOUND_OWNER_GROUPS", "2000")],
    )
    .unwrap();
    assert_eq!(
        p.dns_servers,
        vec!["10.96.0.10".parse::<std::net::IpAddr>().unwrap()]
    );
    // No -u: istio-iptables' default 1337 (the uid and the gid) when the pod's passwd cannot
    // be read, as its `user.Lookup` failing gives.
    let p = parse(&[], &[]).unwrap();
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![1337], vec![1337]));
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 3] = [
        (
            &["-u", "1337", "--redirect-dns"],
            &[],
            "pass --dns-servers LIST",
        ),
        (&["-u", "istio-proxy"], &[], "give the numeric uid"),
        (
            &["-u", "1337"],
            &[("ISTIO_OUTBOUND_OWNER_GROUPS", "java")],
            "give the numeric gid",
        ),
    ];
    for (args, env, fix) in cases {
        let e = parse(args, env).unwrap_err().to_string();
        assert!(
            e.contains("/run/netns/empty") && e.contains(fix),
            "{args:?} {env:?}: {e}"
        );
    }
}

#[test]
fn owner_groups_env() {
    let g = |name: &str, gid| Group {
        name: name.into(),
        gid,
    };
    assert_eq!(policy(&[], &[]).owner_groups, OwnerGroups::All);
    let p = policy(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS", "java,202")]);
    assert_eq!(
        p.owner_groups,
        OwnerGroups::Include(vec![g("java", 1001), g("202", 202)])
    );
    let p = policy(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", "888,ftp")]);
    assert_eq!(
        p.owner_groups,
        OwnerGroups::Exclude(vec![g("888", 888), g("ftp", 14)])
    );
    let both = [
        ("ISTIO_OUTBOUND_OWNER_GROUPS", "java"),
        ("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", "ftp"),
    ];
    assert_eq!(
        policy(&[], &both).owner_groups,
        OwnerGroups::Include(vec![g("java", 1001)])
    );
    let star = [
        ("ISTIO_OUTBOUND_OWNER_GROUPS", "*"),
        ("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", ""),
    ];
    assert_eq!(policy(&[], &star).owner_groups, OwnerGroups::All);
    let empty = policy(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS", "")]);
    assert_eq!(empty.owner_groups, OwnerGroups::Include(vec![]));
    let (v4, _) = iptables_restore_text(&empty, false);
    assert!(v4.contains("\n-A ISTIO_OUTPUT -j RETURN\n"), "{v4}");
}
