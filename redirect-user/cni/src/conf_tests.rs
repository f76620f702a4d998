//! The plugin's reading of stdin and `CNI_ARGS`.
use crate::conf::{cni_args, default_socket, NetConf};
use crate::error::Code;
use redirect_daemon_api::DaemonPods;

#[test]
fn the_conflist_entry_of_the_issue_parses_with_defaults() {
    let conf = NetConf::parse(
        br#"{"cniVersion": "1.0.0", "name": "k8s", "type": "redirect-cni",
             "daemon_socket": "/run/redirect/daemon/daemon.sock",
             "exclude_namespaces": ["kube-system"], "log_level": "info"}"#,
    )
    .expect("parses");
    assert_eq!(conf.daemon_socket, default_socket());
    assert_eq!(
        conf.daemon_socket.to_str(),
        Some("/run/redirect/daemon/daemon.sock")
    );
    assert_eq!(conf.exclusions.namespaces, ["kube-system"]);
    assert_eq!(conf.exclusions.daemon_pods, DaemonPods::default());
    assert_eq!(conf.exclusions.daemon_pods.namespace, "istio-system");
    assert_eq!(conf.timeout_seconds, 60);
}

#[test]
fn an_unsupported_version_is_error_1_naming_it() {
    let e = NetConf::parse(br#"{"cniVersion": "0.2.0", "type": "redirect-cni"}"#)
        .expect_err("0.2.0 refused");
    assert_eq!(e.code, Code::IncompatibleVersion);
    assert!(e.msg.contains("0.2.0"), "{e}");
}

#[test]
fn the_versions_primaries_ship_parse_and_their_prev_result_is_read() {
    // flannel's and Calico's stock conflists say 0.3.1: prevResult in that version's shape
    // (`ips[].version`, `interface`), as libcni hands it to a chained plugin.
    for v in ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] {
        let text = format!(
            r#"{{"cniVersion": "{v}", "name": "cbr0", "type": "redirect-cni",
                 "prevResult": {{"cniVersion": "{v}", "interfaces": [{{"name": "eth0", "sandbox": "/var/run/netns/cni-1"}}],
                   "ips": [{{"version": "4", "address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 0}}],
                   "routes": [{{"dst": "0.0.0.0/0"}}], "dns": {{}}}}}}"#
        );
        let conf = NetConf::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(
            conf.prev_ips().expect("ips"),
            ["10.244.1.5".parse::<std::net::IpAddr>().expect("ip")],
            "{v}"
        );
    }
}

#[test]
fn a_command_newer_than_the_version_is_error_1() {
    let text = br#"{"cniVersion": "0.3.1", "type": "redirect-cni"}"#;
    let e = NetConf::parse_for(text, "CHECK").expect_err("CHECK in 0.3.1");
    assert_eq!(e.code, Code::IncompatibleVersion);
    assert!(e.msg.contains("CHECK") && e.msg.contains("0.3.1"), "{e}");
    let e = NetConf::parse_for(br#"{"cniVersion": "1.0.0", "type": "redirect-cni"}"#, "GC")
        .expect_err("GC in 1.0.0");
    assert!(e.details.contains("1.1.0"), "{e}");
    NetConf::parse_for(
        br#"{"cniVersion": "0.4.0", "type": "redirect-cni"}"#,
        "CHECK",
    )
    .expect("CHECK in 0.4.0");
}

#[test]
fn stdin_that_is_not_a_config_is_error_6() {
    let e = NetConf::parse(b"{not json").expect_err("refused");
    assert_eq!(e.code, Code::Decoding);
}

#[test]
fn prev_result_addresses_are_read_and_bad_ones_named() {
    let conf = NetConf::parse(
        br#"{"cniVersion": "1.0.0", "prevResult": {"cniVersion": "1.0.0",
             "ips": [{"address": "198.18.200.2/24", "gateway": "198.18.200.1"},
                     {"address": "fd00::2/64"}]}}"#,
    )
    .expect("parses");
    let ips: Vec<String> = conf
        .prev_ips()
        .expect("addresses")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(ips, ["198.18.200.2", "fd00::2"]);
    let bad =
        NetConf::parse(br#"{"cniVersion": "1.0.0", "prevResult": {"ips": [{"address": "x/24"}]}}"#)
            .expect("parses");
    let e = bad.prev_ips().expect_err("refused");
    assert_eq!(e.code, Code::InvalidConfig);
    assert!(e.msg.contains("\"x/24\""), "{e}");
    let none = NetConf::parse(br#"{"cniVersion": "1.0.0"}"#).expect("parses");
    assert_eq!(
        none.prev_ips().expect_err("no prevResult").code,
        Code::InvalidConfig
    );
}

#[test]
fn cni_args_are_split_on_semicolons() {
    let args = cni_args(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=hello-1;K8S_POD_UID=u-1;junk",
    );
    assert_eq!(args["K8S_POD_NAMESPACE"], "shop");
    assert_eq!(args["K8S_POD_NAME"], "hello-1");
    assert_eq!(args["K8S_POD_UID"], "u-1");
    assert!(!args.contains_key("junk"));
}
