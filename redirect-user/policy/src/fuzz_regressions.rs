//! The minimal inputs the property tests (tests/fuzz) found, kept as plain unit tests.
use super::inbound_spec::InboundSpec;
use super::test_support::*;

/// `-c`/`-k` accepted names the kernel refuses (`dev_valid_name`): `:`, `.`, `..`, NUL.
#[test]
fn interface_names_the_kernel_refuses_are_named() {
    for (flag, label) in [
        ("-c", "-c/--istio-exclude-interfaces"),
        ("-k", "-k/--kube-virt-interfaces"),
    ] {
        for bad in [":", "eth0:1", ".", "..", "a\0b"] {
            let e = error(&[flag, &format!("eth0,{bad}")], &[]);
            assert!(e.starts_with(label), "{e}");
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
    assert_eq!(
        policy(&["-c", "eth0,a.b,veth-1_x"], &[]).exclude_interfaces,
        ["eth0", "a.b", "veth-1_x"]
    );
}

/// `--inbound ..` named `/run/netns/..`, i.e. `/run`.
#[test]
fn inbound_spec_dot_names_are_refused() {
    for bad in ["..", ".", " .. "] {
        let e = bad.parse::<InboundSpec>().expect_err(bad);
        assert!(e.contains(&format!("'{}'", bad.trim())), "{e}");
    }
    let ok: InboundSpec = "..pod".parse().expect("a name starting with dots");
    assert_eq!(ok.netns, std::path::Path::new("/run/netns/..pod"));
}
