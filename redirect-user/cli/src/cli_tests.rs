//! Tests of the command-line definition: consistency, defaults, flag errors.
use super::*;
use clap::CommandFactory;

#[test]
fn cli_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn ports() {
    assert_eq!(parse_port("15001"), Ok(15001));
    assert_eq!(parse_port("65535"), Ok(65535));
    assert!(parse_port("0").unwrap_err().contains("port 0"));
    assert!(parse_port("65536").unwrap_err().contains("above 65535"));
    assert!(parse_port("99999999999")
        .unwrap_err()
        .contains("above 65535"));
    assert!(parse_port("http")
        .unwrap_err()
        .contains("'http' is not a port"));
    assert!(parse_port("-1").is_err());
}

#[test]
fn bpf_log_levels() {
    assert_eq!(parse_bpf_log("off"), Ok(0));
    assert_eq!(parse_bpf_log("DEBUG"), Ok(4));
    assert!(parse_bpf_log("loud").is_err());
}

#[test]
fn cidrs() {
    assert_eq!(
        parse_cidr("10.96.0.0/12").map(|n| n.to_string()),
        Ok("10.96.0.0/12".into())
    );
    assert_eq!(
        parse_cidr("10.1.2.3").map(|n| n.to_string()),
        Ok("10.1.2.3/32".into())
    );
    assert_eq!(
        parse_cidr("10.1.2.3/8").map(|n| n.to_string()),
        Ok("10.0.0.0/8".into())
    );
    assert!(parse_cidr("10.0.0.0/33")
        .unwrap_err()
        .contains("10.0.0.0/33"));
}

#[test]
fn ids() {
    assert_eq!(parse_id("1337"), Ok(1337));
    assert_eq!(parse_id("0"), Ok(0));
    assert!(parse_id("istio-proxy")
        .unwrap_err()
        .contains("id -u istio-proxy"));
    assert!(parse_id("-5").is_err());
}

#[test]
fn attach_defaults_are_istios() {
    // --cgroup must name a cgroup v2 directory: the mount itself is one.
    let Ok(root) = redirect_datapath::cgroup2_root() else {
        return; // no cgroup v2 on this machine: nothing to parse against
    };
    let root = root.display().to_string();
    let cli = Cli::try_parse_from(["redirect", "attach", "--cgroup", &root]).expect("parse");
    match cli.command {
        Command::Attach(crate::attach_args::AttachArgs {
            proxy_uid,
            proxy_gid,
            outbound_port,
            proxy_cgroup,
            ..
        }) => {
            assert_eq!((proxy_uid, proxy_gid, outbound_port), (1337, 1337, 15001));
            assert_eq!(proxy_cgroup, None);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn bad_values_name_the_flag() {
    // The bad flag first: clap reports values in the order given.
    let err = Cli::try_parse_from([
        "redirect",
        "attach",
        "--outbound-port",
        "0",
        "--cgroup",
        "/x",
    ])
    .expect_err("must fail")
    .to_string();
    assert!(err.contains("--outbound-port"), "{err}");
    let err = Cli::try_parse_from([
        "redirect",
        "attach",
        "--proxy-uid",
        "istio",
        "--cgroup",
        "/x",
    ])
    .expect_err("must fail")
    .to_string();
    assert!(
        err.contains("--proxy-uid") && err.contains("numeric"),
        "{err}"
    );
}

#[test]
fn exec_takes_trailing_command() {
    let cli =
        Cli::try_parse_from(["redirect", "exec", "--", "curl", "-s", "http://x/"]).expect("parse");
    match cli.command {
        Command::Exec {
            command, cgroup, ..
        } => {
            assert_eq!(command, ["curl", "-s", "http://x/"]);
            assert!(cgroup.is_none());
        }
        other => panic!("unexpected {other:?}"),
    }
}
