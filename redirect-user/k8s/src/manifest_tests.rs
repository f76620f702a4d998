//! Istio's kube-inject manifests: istio-cni's path agrees with their istio-init, and their migrated
//! form is meshed with the same policy.

use redirect_testkit::reference::inject;

use crate::compare::compare;
use crate::manifest::{documents, istio_init_args, istio_init_policy, migrate};
use crate::*;

use redirect_testkit::reference::INJECT_MANIFESTS as MANIFESTS;

#[test]
fn every_manifest_migrates_to_a_meshed_pod_with_istio_inits_policy() {
    for name in MANIFESTS {
        let docs = documents(&inject(name)).unwrap();
        let mut doc = docs.into_iter().find(|d| d.kind() == "Deployment").unwrap();
        let pod = doc.pod().unwrap().unwrap();
        assert_eq!(
            decide(&pod).to_string(),
            "skipped: istio-init present",
            "{name}"
        );
        let init = istio_init_policy(&istio_init_args(&pod).unwrap()).unwrap();
        let m = migrate(&mut doc).unwrap();
        assert!(m.removed_istio_init, "{name}");
        let text = crate::manifest::to_yaml(&doc).unwrap();
        assert!(
            !text.contains("istio-init\n") && !text.contains("NET_RAW"),
            "{name}: {text}"
        );
        // What --migrate prints reads back as the same pod.
        let back = documents(&text).unwrap().remove(0).pod().unwrap().unwrap();
        assert_eq!(decide(&back), Decision::Meshed, "{name}");
        // istio-validation in istio-init's place, as the injector emits it with istio-cni.
        assert!(validation::has_istio_validation(&back), "{name}: {text}");
        let v = back
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .as_ref()
            .unwrap();
        let v = v.iter().find(|c| c.name == "istio-validation").unwrap();
        let args = v.args.as_ref().unwrap();
        assert_eq!(
            args[args.len() - 2..],
            ["--run-validation", "--skip-rule-apply"],
            "{name}"
        );
        let sc = v.security_context.as_ref().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_group),
            (Some(1337), Some(1337)),
            "{name}"
        );
        assert_eq!(sc.run_as_non_root, Some(true), "{name}");
        assert!(
            sc.capabilities.as_ref().is_none_or(|c| c.add.is_none()),
            "{name}: no capability added"
        );
        let ours = policy(&back, None).unwrap();
        let c = compare(&ours, &init);
        assert!(c.agree(), "{name}: {:?}", c.differences);
        assert!(
            c.istio_cni_only.iter().any(|d| d.field == "exclude_ports"),
            "{name}: istio-cni's outbound 15020 is shown: {c:?}"
        );
    }
}

#[test]
fn a_changed_annotation_is_a_named_difference() {
    let docs = documents(&inject("traffic-params.yaml")).unwrap();
    let mut doc = docs.into_iter().find(|d| d.kind() == "Deployment").unwrap();
    let pod = doc.pod().unwrap().unwrap();
    let init = istio_init_policy(&istio_init_args(&pod).unwrap()).unwrap();
    // The pod's own annotation is kept by the migration, as the injector keeps it.
    doc.value["spec"]["template"]["metadata"]["annotations"][INCLUDE_INBOUND_PORTS] = "8080".into();
    migrate(&mut doc).unwrap();
    let ours = policy(&doc.pod().unwrap().unwrap(), None).unwrap();
    let c = compare(&ours, &init);
    let fields: Vec<&str> = c.differences.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(fields, ["inbound_ports"]);
}

#[test]
fn multi_document_and_json_manifests_and_other_kinds() {
    let text = format!(
        "---\napiVersion: v1\nkind: Service\nmetadata: {{name: s}}\n---\n{}",
        inject("hello.yaml")
    );
    let docs = documents(&text).unwrap();
    assert_eq!(docs.len(), 2);
    assert!(docs[0].pod().unwrap().is_none());
    assert!(docs[1].pod().unwrap().is_some());
    let json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"a"}]}}"#;
    let pod = documents(json).unwrap().remove(0).pod().unwrap().unwrap();
    assert_eq!(
        decide(&pod).to_string(),
        "skipped: no istio-proxy container"
    );
    let bad = "kind: Pod\nspec:\n  containers: 5\n";
    let e = documents(bad)
        .unwrap()
        .remove(0)
        .pod()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("document 1") && e.contains("does not decode"),
        "{e}"
    );
}
