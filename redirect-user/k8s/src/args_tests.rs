//! Every annotation and proxy field against the istio-iptables arguments istio-cni computes for it,
//! and the errors for bad values.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{PodDNSConfig, PodIP, PodSecurityContext, PodStatus};

use crate::test_pods::*;
use crate::*;

/// istio-cni's arguments for a pod with no annotation, as a flag -> value table.
const DEFAULTS: &[(&str, &str)] = &[
    ("-p", "15001"),
    ("-z", "15006"),
    ("-u", "1337"),
    ("-g", "1337"),
    ("-m", "REDIRECT"),
    ("-i", "*"),
    ("-x", ""),
    ("-b", "*"),
    ("-d", "15020,15021,15090"),
    ("-o", "15020"),
    ("-q", ""),
    ("-c", ""),
    ("-k", ""),
];

/// The defaults with `changes` applied (a value of `None` appends a bool flag).
fn expected(changes: &[(&str, Option<&str>)]) -> Vec<String> {
    let mut out: Vec<(String, Option<String>)> = DEFAULTS
        .iter()
        .map(|(f, v)| (f.to_string(), Some(v.to_string())))
        .collect();
    for (flag, value) in changes {
        match out.iter_mut().find(|(f, _)| f == flag) {
            Some(slot) => slot.1 = value.map(str::to_owned),
            None => out.push((flag.to_string(), value.map(str::to_owned))),
        }
    }
    out.into_iter()
        .flat_map(|(f, v)| std::iter::once(f).chain(v))
        .collect()
}

fn args_of(pod: &Pod) -> Vec<String> {
    istio_iptables_args(pod, None).expect("arguments")
}

#[test]
fn defaults_are_istio_cnis() {
    assert_eq!(args_of(&injected()), expected(&[]));
    let p = policy(&injected(), None).unwrap();
    assert_eq!(p.inbound_exclude_ports, vec![15020, 15021, 15090]);
    assert_eq!(p.exclude_ports, vec![15020]);
}

#[test]
fn every_annotation_becomes_its_flag() {
    #[rustfmt::skip]
    let table: &[(&str, &str, &str, &str)] = &[
        // annotation, value, flag, what istio-cni passes
        (INTERCEPTION_MODE, "TPROXY", "-m", "TPROXY"),
        (INTERCEPTION_MODE, "REDIRECT", "-m", "REDIRECT"),
        (INCLUDE_OUTBOUND_IP_RANGES, "10.0.0.0/8,192.168.0.0/16", "-i", "10.0.0.0/8,192.168.0.0/16"),
        (INCLUDE_OUTBOUND_IP_RANGES, "", "-i", ""),
        (EXCLUDE_OUTBOUND_IP_RANGES, "10.96.0.0/12", "-x", "10.96.0.0/12"),
        (INCLUDE_INBOUND_PORTS, "8080,9090", "-b", "8080,9090"),
        (INCLUDE_INBOUND_PORTS, "", "-b", ""),
        // 15020, 15021, 15090 added whatever the annotation says, each once.
        (EXCLUDE_INBOUND_PORTS, "4,5,6", "-d", "4,5,6,15020,15021,15090"),
        (EXCLUDE_INBOUND_PORTS, "15021,22,", "-d", "15021,22,15020,15090"),
        (EXCLUDE_INBOUND_PORTS, "", "-d", "15020,15021,15090"),
        (STATUS_PORT, "15777", "-d", "15020,15021,15090,15777"),
        (STATUS_PORT, "0", "-d", "15020,15021,15090"),
        (INCLUDE_OUTBOUND_PORTS, "3306", "-q", "3306"),
        (EXCLUDE_OUTBOUND_PORTS, "7,8,9", "-o", "7,8,9"),
        (EXCLUDE_OUTBOUND_PORTS, "", "-o", ""),
        (EXCLUDE_INTERFACES, "eth1,net2", "-c", "eth1,net2"),
        (KUBEVIRT_INTERFACES, "net1", "-k", "net1"),
        (REROUTE_VIRTUAL_INTERFACES, "net3", "-k", "net3"),
    ];
    for (annotation, value, flag, want) in table {
        let pod = annotate(injected(), annotation, value);
        assert_eq!(
            args_of(&pod),
            expected(&[(flag, Some(want))]),
            "{annotation}={value:?}"
        );
        policy(&pod, None).unwrap_or_else(|e| panic!("{annotation}={value:?}: {e}"));
    }
}

#[test]
fn reroute_virtual_interfaces_beats_the_deprecated_kubevirt_annotation() {
    let pod = annotate(injected(), KUBEVIRT_INTERFACES, "old0");
    let pod = annotate(pod, REROUTE_VIRTUAL_INTERFACES, "new0");
    assert_eq!(args_of(&pod), expected(&[("-k", Some("new0"))]));
}

#[test]
fn the_status_port_from_the_proxys_args_is_excluded_inbound() {
    let mut pod = injected();
    let args = proxy_mut(&mut pod).args.as_mut().unwrap();
    args.extend(["--statusPort".to_owned(), "15777".to_owned()]);
    assert_eq!(
        args_of(&pod),
        expected(&[("-d", Some("15020,15021,15090,15777"))])
    );
    let pod = annotate(pod, STATUS_PORT, "15888");
    assert_eq!(
        args_of(&pod),
        expected(&[("-d", Some("15020,15021,15090,15888"))])
    );
}

#[test]
fn interception_mode_falls_back_to_what_the_injector_told_the_proxy() {
    let pod = proxy_env(injected(), "ISTIO_META_INTERCEPTION_MODE", "TPROXY");
    assert_eq!(args_of(&pod), expected(&[("-m", Some("TPROXY"))]));
    let pod = annotate(pod, INTERCEPTION_MODE, "REDIRECT");
    assert_eq!(args_of(&pod), expected(&[]));
}

#[test]
fn proxy_ids_come_from_its_security_context_then_the_pods() {
    let mut pod = injected();
    let sc = proxy_mut(&mut pod).security_context.as_mut().unwrap();
    sc.run_as_user = Some(2000);
    sc.run_as_group = Some(3000);
    assert_eq!(
        args_of(&pod),
        expected(&[("-u", Some("2000")), ("-g", Some("3000"))])
    );
    // No container ids: the pod's securityContext applies to the container.
    proxy_mut(&mut pod).security_context = None;
    pod.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        run_as_user: Some(4000),
        run_as_group: Some(5000),
        ..Default::default()
    });
    assert_eq!(
        args_of(&pod),
        expected(&[("-u", Some("4000")), ("-g", Some("5000"))])
    );
    // 0 (a TPROXY proxy runs as root) counts as unset: 1337.
    let mut pod = injected();
    proxy_mut(&mut pod)
        .security_context
        .as_mut()
        .unwrap()
        .run_as_user = Some(0);
    assert_eq!(args_of(&pod), expected(&[]));
    let p = policy(&pod, None).unwrap();
    assert_eq!((p.proxy_uids, p.proxy_gids), (vec![1337], vec![1337]));
}

#[test]
fn dns_capture_names_the_servers_kubelet_gives_the_pod() {
    let cluster: IpAddr = "10.96.0.10".parse().unwrap();
    let pod = proxy_env(injected(), "ISTIO_META_DNS_CAPTURE", "true");
    let got = istio_iptables_args(&pod, Some(cluster)).unwrap();
    assert_eq!(
        got,
        expected(&[
            ("--redirect-dns", None),
            ("--dns-servers", Some("10.96.0.10"))
        ])
    );
    let p = policy(&pod, Some(cluster)).unwrap();
    assert!(p.dns_enabled());
    assert_eq!(p.dns_servers, vec![cluster]);
    // ClusterFirst plus dnsConfig: both.
    let mut extra = pod.clone();
    extra.spec.as_mut().unwrap().dns_config = Some(PodDNSConfig {
        nameservers: Some(vec!["1.1.1.1".into()]),
        ..Default::default()
    });
    let p = policy(&extra, Some(cluster)).unwrap();
    assert_eq!(p.dns_servers, vec![cluster, "1.1.1.1".parse().unwrap()]);
    // dnsPolicy None: only dnsConfig's, no cluster DNS needed.
    extra.spec.as_mut().unwrap().dns_policy = Some("None".into());
    assert_eq!(
        policy(&extra, None).unwrap().dns_servers,
        vec!["1.1.1.1".parse::<IpAddr>().unwrap()]
    );
    // "false" captures nothing.
    let off = proxy_env(injected(), "ISTIO_META_DNS_CAPTURE", "false");
    assert_eq!(args_of(&off), expected(&[]));
}

#[test]
fn dns_capture_without_a_known_server_is_an_error_with_a_sentence() {
    let pod = proxy_env(injected(), "ISTIO_META_DNS_CAPTURE", "true");
    let e = policy(&pod, None).unwrap_err().to_string();
    assert!(
        e.contains("ClusterFirst") && e.contains("cluster DNS"),
        "{e}"
    );
    let mut node = pod.clone();
    node.spec.as_mut().unwrap().dns_policy = Some("Default".into());
    let e = policy(&node, Some("10.96.0.10".parse().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("node's resolv.conf"), "{e}");
    let mut none = pod;
    none.spec.as_mut().unwrap().dns_policy = Some("None".into());
    let e = policy(&none, None).unwrap_err().to_string();
    assert!(e.contains("names no DNS server"), "{e}");
}

#[test]
fn dual_stack_from_the_proxy_env_or_an_ipv6_pod_address() {
    let pod = proxy_env(injected(), "ISTIO_DUAL_STACK", "true");
    assert_eq!(args_of(&pod), expected(&[("--dual-stack", None)]));
    let mut pod = injected();
    pod.status = Some(PodStatus {
        pod_ips: Some(vec![
            PodIP {
                ip: "10.1.0.5".into(),
            },
            PodIP {
                ip: "fd00::5".into(),
            },
        ]),
        ..Default::default()
    });
    assert_eq!(args_of(&pod), expected(&[("--dual-stack", None)]));
    assert!(policy(&pod, None).unwrap().dual_stack);
    pod.status.as_mut().unwrap().pod_ips = Some(vec![PodIP {
        ip: "10.1.0.5".into(),
    }]);
    assert_eq!(args_of(&pod), expected(&[]));
}

#[test]
fn invalid_drop_from_the_proxy_env() {
    let pod = proxy_env(injected(), "INVALID_DROP", "true");
    assert_eq!(args_of(&pod), expected(&[("--drop-invalid", None)]));
    assert!(policy(&pod, None).unwrap().drop_invalid);
}

#[test]
fn a_bad_value_is_an_error_naming_the_annotation_and_the_value() {
    #[rustfmt::skip]
    let table: &[(&str, &str, &str)] = &[
        (INTERCEPTION_MODE, "NAT", "NAT"),
        (INTERCEPTION_MODE, "", ""),
        (INCLUDE_OUTBOUND_IP_RANGES, "10.0.0.0/33", "10.0.0.0/33"),
        (EXCLUDE_OUTBOUND_IP_RANGES, "10.0.0.1/32,nope", "nope"),
        (EXCLUDE_OUTBOUND_IP_RANGES, "*", "*"),
        (INCLUDE_INBOUND_PORTS, "80,http", "http"),
        (EXCLUDE_INBOUND_PORTS, "70000", "70000"),
        (INCLUDE_OUTBOUND_PORTS, "-1", "-1"),
        (EXCLUDE_OUTBOUND_PORTS, "0", "0"),
        (EXCLUDE_INTERFACES, "bad/name", "bad/name"),
        (REROUTE_VIRTUAL_INTERFACES, "this-name-is-far-too-long", "this-name-is-far-too-long"),
        (STATUS_PORT, "port", "port"),
    ];
    for (annotation, value, item) in table {
        let pod = annotate(injected(), annotation, value);
        let e = policy(&pod, None).expect_err(&format!("{annotation}={value:?}"));
        let text = e.to_string();
        assert!(
            matches!(e, Error::Invalid { .. })
                && text.contains(annotation)
                && text.contains(&format!("{item:?}")),
            "{annotation}={value:?}: {text}"
        );
    }
    let pod = proxy_env(injected(), "ISTIO_META_DNS_CAPTURE", "yes");
    let e = policy(&pod, None).unwrap_err().to_string();
    assert!(
        e.contains("ISTIO_META_DNS_CAPTURE") && e.contains("\"yes\""),
        "{e}"
    );
}
