//! `redirect pod-policy` on Istio's kube-inject manifests, as the real binary runs it (no privilege
//! needed): istio-cni's path agrees with each manifest's istio-init, `--migrate` gives a pod
//! that is meshed with the same policy, and a disagreement exits 1 naming the field.
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use redirect_testkit::reference;
use redirect_tests::bin_path;
use serde_json::Value;

use redirect_testkit::reference::INJECT_MANIFESTS as MANIFESTS;

fn pod_policy(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(bin_path("redirect"))
        .arg("pod-policy")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run redirect pod-policy");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .expect("write stdin");
    drop(input);
    child
        .wait_with_output()
        .expect("wait for redirect pod-policy")
}

fn path(name: &str) -> String {
    let p = reference::dir().join(format!("inject/{name}.injected"));
    p.to_str().expect("utf-8 path").to_owned()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

#[test]
fn every_manifest_agrees_with_its_istio_init_and_migrates_to_a_meshed_pod() {
    for name in MANIFESTS {
        let file = path(name);
        let out = pod_policy(&[&file, "--json"], None);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        let report = &json_of(&out)[0];
        assert_eq!(report["decision"]["reason"], "istio_init", "{name}");
        assert_eq!(report["migrated_decision"]["decision"], "meshed", "{name}");
        assert_eq!(
            report["comparison"]["differences"],
            Value::Array(vec![]),
            "{name}"
        );
        let init = report["istio_init_args"]
            .as_array()
            .expect("istio-init args");
        let want: Vec<Value> = reference::istio_init_args(&reference::inject(name))
            .into_iter()
            .map(Value::from)
            .collect();
        assert_eq!(*init, want, "{name}: the istio-init arguments found");

        let migrated = pod_policy(&[&file, "--migrate"], None);
        assert!(
            migrated.status.success(),
            "{name}: {}",
            text(&migrated.stderr)
        );
        let yaml = text(&migrated.stdout);
        assert!(
            !yaml.contains("name: istio-init") && !yaml.contains("NET_RAW"),
            "{name}: {yaml}"
        );
        // istio-init became istio-validation in its place, as the injector writes it.
        assert!(
            yaml.contains("name: istio-validation\n")
                && yaml.contains("- --run-validation\n")
                && yaml.contains("runAsUser: 1337"),
            "{name}: {yaml}"
        );
        // The manifest's own lines, in order, quoting and all: only istio-init's item is
        // written again (as istio-validation's) and the sidecar annotations' lines change.
        let original = std::fs::read_to_string(&file).expect("manifest");
        let mut rest = original.lines();
        let lines: Vec<&str> = yaml.lines().collect();
        let depth = |l: &str| l.len() - l.trim_start().len();
        let named = lines
            .iter()
            .position(|l| l.trim_start().trim_start_matches("- ") == "name: istio-validation")
            .expect("the item's name");
        // The item starts at its `- ` line, at the depth of the name's key.
        let item = (0..=named)
            .rev()
            .find(|&i| {
                lines[i].trim_start().starts_with("- ")
                    && (i == named || depth(lines[i]) + 2 == depth(lines[named]))
            })
            .expect("the item");
        let end = (item + 1..lines.len())
            .find(|&i| depth(lines[i]) <= depth(lines[item]))
            .unwrap_or(lines.len());
        let own = lines[..item].iter().chain(&lines[end..]);
        for line in own.filter(|l| !l.contains("sidecar.istio.io/")) {
            assert!(
                rest.any(|o| o == *line),
                "{name}: {line:?} is not the manifest's own, in order:\n{yaml}"
            );
        }
        let again = pod_policy(&["-", "--json"], Some(&yaml));
        assert!(again.status.success(), "{name}: {}", text(&again.stderr));
        let again = &json_of(&again)[0];
        assert_eq!(again["decision"]["decision"], "meshed", "{name}");
        assert_eq!(
            again["policy"], report["policy"],
            "{name}: the migrated pod's policy"
        );
        assert_eq!(again["istio_init_args"], Value::Null, "{name}");
    }
}

#[test]
fn text_output_shows_both_argument_lists_and_the_decision() {
    let out = pod_policy(&[&path("kubevirtInterfaces.yaml")], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    for want in [
        "decision           skipped: istio-init present",
        "with istio-cni     meshed",
        "istio-init runs    istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT",
        "-d 123,15020,15021,15090",
        "-k net1",
        "agrees with istio-init's arguments",
    ] {
        assert!(s.contains(want), "{want:?} missing in:\n{s}");
    }
}

#[test]
fn a_disagreement_exits_1_naming_the_field() {
    // The pod says TPROXY while istio-init was given REDIRECT.
    let manifest = reference::inject("hello.yaml").replace(
        "        istio.io/rev: default\n",
        "        istio.io/rev: default\n        sidecar.istio.io/interceptionMode: TPROXY\n",
    );
    let out = pod_policy(&["-"], Some(&manifest));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("DIFFERS            mode"),
        "{}",
        text(&out.stdout)
    );
    let err = text(&out.stderr);
    assert!(err.contains("document 1 (Deployment hello): mode"), "{err}");
}

#[test]
fn a_bad_annotation_is_an_error_naming_it_and_its_value() {
    let manifest = reference::inject("hello.yaml").replace(
        "        istio.io/rev: default\n",
        "        istio.io/rev: default\n        traffic.sidecar.istio.io/excludeOutboundIPRanges: 10.0.0.0/40\n",
    );
    let out = pod_policy(&["-"], Some(&manifest));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("traffic.sidecar.istio.io/excludeOutboundIPRanges")
            && err.contains("\"10.0.0.0/40\""),
        "{err}"
    );
}

#[test]
fn help_teaches_the_rules() {
    let out = Command::new(bin_path("redirect"))
        .args(["pod-policy", "--help"])
        .output()
        .expect("run redirect pod-policy --help");
    assert!(out.status.success());
    let s = text(&out.stdout);
    for want in [
        "--migrate",
        "--cluster-dns",
        "sidecar.istio.io/status",
        "excludeInboundPorts",
        "Examples:",
    ] {
        assert!(s.contains(want), "{want:?} missing in:\n{s}");
    }
}

#[test]
fn our_annotations_are_checked_and_shown() {
    let annotate = |extra: &str| {
        reference::inject("hello.yaml").replace(
            "        istio.io/rev: default\n",
            &format!("        istio.io/rev: default\n{extra}"),
        )
    };
    // A typo in our key: warned with the key meant, and the binding stays istio's.
    let out = pod_policy(
        &["-"],
        Some(&annotate("        redirect.dev/proxybinding: strict\n")),
    );
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert!(
        e.contains("redirect.dev/proxybinding is not one redirect defines")
            && e.contains("did you mean redirect.dev/proxy-binding?"),
        "{e}"
    );
    assert!(
        o.contains("proxy binding          uid/gid anywhere in the namespace"),
        "{o}"
    );
    assert!(o.contains("reset uncaptured       no"), "{o}");
    // Both of ours, written right: shown in the text.
    let out = pod_policy(
        &["-"],
        Some(&annotate(
            "        redirect.dev/proxy-binding: strict\n        redirect.dev/reset-uncaptured: \"true\"\n",
        )),
    );
    let o = text(&out.stdout);
    assert!(
        o.contains("proxy binding          strict: closed")
            && o.contains("reset uncaptured       yes (redirect.dev/reset-uncaptured)"),
        "{o}{}",
        text(&out.stderr)
    );
    // A value that is neither true nor false is refused, named, not taken as false.
    let out = pod_policy(
        &["-"],
        Some(&annotate(
            "        redirect.dev/reset-uncaptured: \"yes\"\n",
        )),
    );
    let e = text(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        e.contains("redirect.dev/reset-uncaptured") && e.contains("yes"),
        "{e}"
    );
}

#[test]
fn istio_validation_is_said_to_pass_under_either_binding() {
    // The pod as the injector emits it with istio-cni: istio-validation where istio-init was.
    let with_validation = |extra: &str| {
        reference::inject("hello.yaml")
            .replace(
                "        name: istio-init\n",
                "        name: istio-validation\n",
            )
            .replace(
                "        istio.io/rev: default\n",
                &format!("        istio.io/rev: default\n{extra}"),
            )
    };
    let out = pod_policy(
        &["-"],
        Some(&with_validation(
            "        redirect.dev/proxy-binding: strict\n",
        )),
    );
    let o = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        o.contains(
            "istio-validation   passes: while it runs, the uid bypass follows its container"
        ),
        "{o}"
    );
    let o = text(&pod_policy(&["-"], Some(&with_validation(""))).stdout);
    assert!(
        o.contains("istio-validation   passes: its dial as the proxy's uid to 127.0.0.6:15002"),
        "{o}"
    );
    // A pod with istio-init: its migrated form (what --migrate prints) has istio-validation.
    let o = text(&pod_policy(&[&path("hello.yaml")], None).stdout);
    assert!(o.contains("istio-validation   passes: its dial"), "{o}");
    // A pod with neither: no line.
    let neither = reference::inject("hello.yaml").replace(
        "        name: istio-init
",
        "        name: some-init
",
    );
    let o = text(&pod_policy(&["-"], Some(&neither)).stdout);
    assert!(!o.contains("istio-validation   "), "no such container: {o}");
}
