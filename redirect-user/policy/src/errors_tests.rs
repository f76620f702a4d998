//! Tests of parse errors, CIDR/DNS/loopback handling and cluster.env layering.

use std::collections::HashMap;
use std::net::IpAddr;

use super::test_support::*;
use super::*;

#[test]
fn cidrs_loopback_and_dns() {
    let p = policy(
        &[
            "-i",
            "10.1.2.3/8,2001:db8::1/32",
            "-x",
            "::ffff:10.0.0.0/104",
        ],
        &[],
    );
    // Host bits are cleared, as iptables clears them (with a warning).
    assert_eq!(
        p.include_cidrs,
        Cidrs::List(nets(&["10.0.0.0/8", "2001:db8::/32"]))
    );
    assert_eq!(p.exclude_cidrs, nets(&["::ffff:10.0.0.0/104"]));
    assert!(!p.include_has_loopback());
    assert!(policy(&["-i", "127.0.0.1/24,10.0.0.0/8"], &[]).include_has_loopback());
    assert!(policy(&["-i", "::1/128"], &[]).include_has_loopback());
    assert!(!policy(&["-i", "0.0.0.0/0"], &[]).include_has_loopback());
    assert!(!policy(&["-i", "*"], &[]).include_has_loopback());

    let lb = policy(&[], &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "127.0.0.1/8")]);
    assert_eq!(lb.ipv4_loopback_cidr.to_string(), "127.0.0.1/8");

    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let resolv = Stub::with_resolv("nameserver 10.96.0.10\nnameserver fd00::a\n");
    let p = run(&["--redirect-dns"], &[], &resolv).unwrap().policy;
    assert_eq!(p.dns_servers, vec![ip("10.96.0.10"), ip("fd00::a")]);
    assert!(p.dns_enabled());
    let p = run(
        &["--redirect-dns", "--dns-servers", "1.1.1.1,::1"],
        &[],
        &resolv,
    )
    .unwrap()
    .policy;
    assert_eq!(p.dns_servers, vec![ip("1.1.1.1"), ip("::1")]);
    // No resolv.conf needed when DNS capture is off or captures everything.
    let none = Stub::default();
    assert!(run(&[], &[], &none).is_ok());
    let p = run(&["--redirect-dns", "--capture-all-dns"], &[], &none)
        .unwrap()
        .policy;
    assert!(p.dns_enabled() && p.dns_servers.is_empty());
    let p = run(&["--redirect-dns"], &[], &Stub::with_resolv("search x\n"))
        .unwrap()
        .policy;
    assert!(!p.dns_enabled());
    let e = run(&["--redirect-dns"], &[], &none)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--redirect-dns is on")
            && e.contains("/etc/resolv.conf")
            && e.contains("pass --dns-servers LIST"),
        "{e}"
    );
}

#[test]
fn errors_name_flag_and_value() {
    assert_eq!(
        error(&["-i", "10.0.0.0/33"], &[]),
        "-i/--istio-service-cidr: \"10.0.0.0/33\" is not a CIDR"
    );
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: &[Case] = &[
        (
            &["-i", "10.0.0.0/8,*"],
            &[],
            &["-i/--istio-service-cidr", "\"*\"", "CIDR"],
        ),
        (
            &["-i", "10.0.0.1"],
            &[],
            &["-i/--istio-service-cidr", "\"10.0.0.1\""],
        ),
        (
            &["-x", "*"],
            &[],
            &[
                "-x/--istio-service-exclude-cidr",
                "\"*\"",
                "OUTBOUND_IP_RANGES_EXCLUDE",
            ],
        ),
        (
            &["-x", "1.1.0.0/16, 2.2.0.0/16"],
            &[],
            &["-x/--istio-service-exclude-cidr", "\" 2.2.0.0/16\""],
        ),
        (
            &["-d", "15090,abc"],
            &[],
            &["-d/--istio-local-exclude-ports", "\"abc\"", "port"],
        ),
        (
            &["-b", "1000:2000"],
            &[],
            &["-b/--istio-inbound-ports", "\"1000:2000\""],
        ),
        (
            &["-q", "70000"],
            &[],
            &["-q/--istio-outbound-ports", "\"70000\""],
        ),
        (
            &["-o", "0"],
            &[],
            &["-o/--istio-local-outbound-ports-exclude", "\"0\""],
        ),
        (&["-p", "0"], &[], &["-p/--envoy-port", "\"0\""]),
        (
            &["-z", "abc"],
            &[],
            &["-z/--inbound-capture-port", "\"abc\""],
        ),
        (
            &["-e", "65536"],
            &[],
            &["-e/--inbound-tunnel-port", "\"65536\""],
        ),
        (
            &["-m", "tproxy"],
            &[],
            &[
                "-m/--istio-inbound-interception-mode",
                "\"tproxy\"",
                "REDIRECT or TPROXY",
            ],
        ),
        (
            &["-u", "istio"],
            &[],
            &["-u/--proxy-uid", "\"istio\"", "uid"],
        ),
        (&["-g", "1,x"], &[], &["-g/--proxy-gid", "\"x\"", "gid"]),
        (&["-u", ","], &[], &["-u/--proxy-uid", "\",\"", "no uid"]),
        (
            &["-u", "1,2,3,4,5,6,7,8,9"],
            &[],
            &["-u/--proxy-uid", "\"1,2,3,4,5,6,7,8,9\"", "at most 8"],
        ),
        (
            &["-g", "1,2,3,4,5,6,7,8,9"],
            &[],
            &["-g/--proxy-gid", "at most 8"],
        ),
        (&["--foo"], &[], &["unknown flag --foo"]),
        (&["--foo=1"], &[], &["unknown flag --foo"]),
        (&["-y", "1"], &[], &["unknown flag -y"]),
        (&["-p"], &[], &["-p/--envoy-port", "needs a value"]),
        (
            &["--istio-service-cidr"],
            &[],
            &["-i/--istio-service-cidr", "needs a value"],
        ),
        (&["15001"], &[], &["unexpected argument \"15001\""]),
        (
            &["-c", "a-very-long-interface-name"],
            &[],
            &[
                "-c/--istio-exclude-interfaces",
                "\"a-very-long-interface-name\"",
            ],
        ),
        (
            &["--dns-servers", "10.0.0.1,dns"],
            &[],
            &["--dns-servers", "\"dns\"", "IP address"],
        ),
        (
            &[],
            &[("ISTIO_OUTBOUND_OWNER_GROUPS", "java,nosuch")],
            &["$ISTIO_OUTBOUND_OWNER_GROUPS", "\"nosuch\"", "group"],
        ),
        (
            &[],
            &[("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", "1,2,3,4,5,6,7,8,9")],
            &["$ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", "at most 8"],
        ),
        (
            &[],
            &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "::1/128")],
            &[
                "$ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR",
                "\"::1/128\"",
                "IPv4 CIDR",
            ],
        ),
        (
            &[],
            &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "10.0.0.1/32")],
            &["\"10.0.0.1/32\"", "loopback"],
        ),
        (
            &[],
            &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "127.0.0.1/7")],
            &["\"127.0.0.1/7\"", "8-32"],
        ),
        (
            &[],
            &[("ISTIO_SERVICE_CIDR", "bad")],
            &["-i/--istio-service-cidr ($ISTIO_SERVICE_CIDR)", "\"bad\""],
        ),
        (
            &[],
            &[("ISTIO_META_DNS_CAPTURE", "yes")],
            &["--redirect-dns ($ISTIO_META_DNS_CAPTURE)", "\"yes\""],
        ),
    ];
    for (args, env, needles) in cases {
        let e = error(args, env);
        for needle in *needles {
            assert!(
                e.contains(needle),
                "{args:?} {env:?}: {e:?} lacks {needle:?}"
            );
        }
    }
}

#[test]
fn vm_cluster_env() {
    let env = parse_cluster_env(&redirect_testkit::reference::vm_cluster_env()).unwrap();
    assert_eq!(
        env["ISTIO_METAJSON_LABELS"],
        r#"{"service.istio.io/canonical-name":"foo","service.istio.io/canonical-revision":"latest"}"#
    );
    assert_eq!(env["ISTIO_META_MESH_ID"], "");
    let sys = Stub::with_resolv("nameserver 10.96.0.10\n");
    let layered = LayeredEnv(HashMap::<String, String>::new(), env);
    let args = ["-p", "15001"].map(String::from);
    let p = parse_invocation(&args, &layered, &sys).unwrap().policy;
    assert_eq!(p.inbound_ports, InboundPorts::All);
    assert_eq!(p.inbound_exclude_ports, vec![22, 15090, 15021, 15020]);
    assert_eq!(p.include_cidrs, Cidrs::All);
    assert!(p.redirect_dns && p.dns_enabled());
    assert_eq!(p.dns_servers, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
    // The real env wins over cluster.env.
    let top = env_of(&[("ISTIO_SERVICE_CIDR", "10.0.0.0/8")]);
    let p = parse_invocation(&args, &LayeredEnv(top, layered.1), &sys)
        .unwrap()
        .policy;
    assert_eq!(p.include_cidrs, Cidrs::List(nets(&["10.0.0.0/8"])));
}

#[test]
fn capture_all_dns_and_tproxy_without_inbound_render() {
    let p = policy(&["--redirect-dns", "--capture-all-dns", "-u", "1337"], &[]);
    let (v4, v6) = iptables_restore_text(&p, true);
    for text in [&v4, v6.as_ref().unwrap()] {
        assert!(
            text.contains("-A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053\n")
        );
        assert!(text.contains("-A ISTIO_INBOUND -p udp --sport 53 -j CT --zone 1\n"));
        assert!(text.contains("-A ISTIO_OUTPUT -j ISTIO_OUTPUT_DNS\n"));
    }
    let p = policy(&["-m", "TPROXY"], &[]);
    let (v4, _) = iptables_restore_text(&p, false);
    assert!(v4.starts_with("* mangle\n-N ISTIO_INBOUND\n"), "{v4}");
    assert!(!v4.contains("ISTIO_DIVERT"), "{v4}");
}
