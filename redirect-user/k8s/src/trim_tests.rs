//! [`trimmed`] keeps every field read: each test pod and kube-inject manifest, one read field
//! changed at a time and carrying bulk nobody reads, decides, resolves and reconciles the same
//! trimmed as whole, and loses the bulk.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, EnvVar,
    EnvVarSource, ObjectFieldSelector, Pod, PodDNSConfig, PodIP, PodSecurityContext, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
use redirect_testkit::reference::{inject, INJECT_MANIFESTS};

use crate::manifest::{documents, migrate};
use crate::test_pods::*;
use crate::*;

/// A marker in every field nobody reads: the trimmed pod must not hold it.
const BULK: &str = "bulk-nobody-reads";

/// `pod` with bulk where nothing reads: foreign annotations and labels, managedFields, the
/// app's and the proxy's other env, ports, a terminated container's message, conditions.
fn with_bulk(mut pod: Pod) -> Pod {
    let long = BULK.repeat(100);
    pod = annotate(
        pod,
        "kubectl.kubernetes.io/last-applied-configuration",
        &long,
    );
    pod = annotate(pod, "sidecar.istio.io/frobnicate", &long);
    pod = label(pod, "app", &long);
    pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some(long.clone()),
        ..Default::default()
    }]);
    pod.metadata.resource_version = Some(BULK.into());
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.service_account_name = Some(BULK.into());
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        c.image = Some(BULK.into());
        let env = c.env.get_or_insert_with(Vec::new);
        env.insert(
            0,
            EnvVar {
                name: "APP_SETTING".into(),
                value: Some(long.clone()),
                value_from: None,
            },
        );
        // istio-proxy's first two args and the one after --statusPort are read.
        let args = c.args.get_or_insert_with(Vec::new);
        let read_last = args.last().is_some_and(|a| a == "--statusPort");
        if c.name != "istio-proxy" || (args.len() >= 2 && !read_last) {
            args.push(BULK.into());
        }
    }
    let Some(status) = pod.status.as_mut() else {
        return pod;
    };
    status.message = Some(long.clone());
    status
        .container_statuses
        .get_or_insert_with(Vec::new)
        .push(ContainerStatus {
            name: "done".into(),
            image: BULK.into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    message: Some(long),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    pod
}

/// A status as the kubelet writes it: an address, the proxy running.
fn with_status(mut pod: Pod, ips: &[&str]) -> Pod {
    pod.status = Some(PodStatus {
        phase: Some("Running".into()),
        pod_ip: ips.first().map(|s| (*s).to_owned()),
        pod_ips: Some(ips.iter().map(|ip| PodIP { ip: (*ip).into() }).collect()),
        init_container_statuses: Some(vec![ContainerStatus {
            name: "istio-proxy".into(),
            container_id: Some("containerd://0123".into()),
            state: Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: None }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    });
    pod
}

fn with_proxy_args(mut pod: Pod, args: &[&str]) -> Pod {
    proxy_mut(&mut pod).args = Some(args.iter().map(|a| (*a).to_owned()).collect());
    pod
}

/// Every test pod: the base, each read annotation, label and env variable set (valid and
/// not), and each read spec and status field changed.
fn test_pods() -> Vec<Pod> {
    let mut pods = vec![injected(), with_status(injected(), &["10.0.0.7"])];
    pods.push(with_status(injected(), &["10.0.0.7", "fd00::7"]));
    for key in READ_ANNOTATIONS {
        for value in [
            "false",
            "true",
            "*",
            "10.0.0.0/8",
            "15021,15090",
            "TPROXY",
            "strict",
            "eth1",
            "x y",
        ] {
            pods.push(annotate(injected(), key, value));
        }
    }
    for key in READ_LABELS {
        for value in ["false", "ambient", "true"] {
            pods.push(label(injected(), key, value));
        }
    }
    for name in READ_ENV {
        for value in ["true", "false", "TPROXY", "maybe"] {
            pods.push(proxy_env(injected(), name, value));
        }
        // A later valueFrom entry of the name hides an earlier literal one.
        let mut hidden = proxy_env(injected(), name, "true");
        proxy_mut(&mut hidden)
            .env
            .as_mut()
            .expect("env")
            .push(EnvVar {
                name: name.into(),
                value: None,
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.name".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            });
        pods.push(hidden);
    }
    for args in [
        &["proxy", "router"][..],
        &["proxy", "sidecar", "--statusPort", "15777"],
        &[
            "proxy",
            "sidecar",
            "--domain",
            "x",
            "--statusPort=15778",
            "--statusPort",
            "1",
        ],
        &["--statusPort", "15779", "proxy"],
        &["proxy", "--statusPort", "bad"],
        &["proxy"],
    ] {
        pods.push(with_proxy_args(injected(), args));
    }
    pods.push(with_container(injected(), "istio-init", true));
    pods.push(with_container(injected(), "istio-init", false));
    let mut no_restart = injected();
    proxy_mut(&mut no_restart).restart_policy = None;
    pods.push(no_restart);
    let mut regular = injected();
    let spec = regular.spec.as_mut().expect("spec");
    let proxy = spec.init_containers.take().expect("inits").remove(0);
    spec.containers.push(proxy);
    pods.push(regular);
    let mut ids = injected();
    proxy_mut(&mut ids).security_context = None;
    ids.spec.as_mut().expect("spec").security_context = Some(PodSecurityContext {
        run_as_user: Some(1500),
        run_as_group: Some(1501),
        ..Default::default()
    });
    pods.push(ids);
    for (policy, servers) in [
        (None, vec!["1.1.1.1"]),
        (Some("None"), vec!["1.1.1.1", "9.9.9.9"]),
        (Some("None"), vec![]),
        (Some("Default"), vec![]),
        (Some("ClusterFirstWithHostNet"), vec!["not-an-ip"]),
    ] {
        let mut dns = proxy_env(injected(), "ISTIO_META_DNS_CAPTURE", "true");
        let spec = dns.spec.as_mut().expect("spec");
        spec.dns_policy = policy.map(Into::into);
        spec.dns_config = Some(PodDNSConfig {
            nameservers: Some(servers.into_iter().map(Into::into).collect()),
            searches: Some(vec![BULK.into()]),
            ..Default::default()
        });
        pods.push(dns);
    }
    let mut host = injected();
    let spec = host.spec.as_mut().expect("spec");
    spec.host_network = Some(true);
    spec.host_users = Some(false);
    spec.node_name = Some("node-a".into());
    pods.push(host);
    let mut deleting = with_status(injected(), &["10.0.0.8"]);
    deleting.metadata.deletion_timestamp = Some(Time(Default::default()));
    deleting.metadata.uid = Some("uid-1".into());
    deleting.metadata.namespace = Some("shop".into());
    pods.push(deleting);
    pods
}

/// Every kube-inject manifest's pod, as injected (istio-init) and migrated to istio-cni's form.
fn manifest_pods() -> Vec<(String, Pod)> {
    let mut out = Vec::new();
    for name in INJECT_MANIFESTS {
        let docs = documents(&inject(name)).expect("the manifest");
        let mut doc = docs
            .into_iter()
            .find(|d| d.kind() == "Deployment")
            .expect("a Deployment");
        out.push((
            name.to_owned(),
            doc.pod().expect("a pod").expect("a template"),
        ));
        migrate(&mut doc).expect("migrated");
        let migrated = doc.pod().expect("a pod").expect("a template");
        out.push((format!("{name}, migrated"), migrated));
    }
    out
}

/// What the daemon's reconcile reads beside the decision and policy.
fn reconciled(pod: &Pod) -> String {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let containers: Vec<(&str, Option<&str>, bool)> = status
        .into_iter()
        .flat_map(|s| {
            [
                &s.container_statuses,
                &s.init_container_statuses,
                &s.ephemeral_container_statuses,
            ]
        })
        .flatten()
        .flatten()
        .filter(|c| c.name != "done")
        .map(|c| {
            let runs = c.state.as_ref().is_some_and(|s| s.running.is_some());
            (c.name.as_str(), c.container_id.as_deref(), runs)
        })
        .collect();
    format!(
        "{:?}",
        (
            (&m.name, &m.namespace, &m.uid, &m.deletion_timestamp),
            (
                spec.and_then(|s| s.host_users),
                spec.and_then(|s| s.node_name.as_ref())
            ),
            status.map(|s| (&s.phase, &s.pod_ip, &s.pod_ips)),
            containers,
        )
    )
}

fn assert_same(what: &str, whole: &Pod) {
    let cluster: Option<IpAddr> = "10.96.0.10".parse().ok();
    let bulky = with_bulk(whole.clone());
    let trim = trimmed(bulky.clone());
    assert_eq!(decide(&trim), decide(whole), "{what}: the decision");
    assert_eq!(decide(&trim), decide(&bulky), "{what}: the decision");
    for dns in [None, cluster] {
        let text = |p: &Pod| format!("{:?}", policy(p, dns).map_err(|e| e.to_string()));
        assert_eq!(text(&trim), text(whole), "{what}: the policy");
        let args = |p: &Pod| {
            format!(
                "{:?}",
                istio_iptables_args(p, dns).map_err(|e| e.to_string())
            )
        };
        assert_eq!(args(&trim), args(whole), "{what}: the arguments");
    }
    assert_eq!(reset_uncaptured(&trim), reset_uncaptured(whole), "{what}");
    assert_eq!(
        reconciled(&trim),
        reconciled(whole),
        "{what}: the reconcile's fields"
    );
    let json = serde_json::to_string(&trim).expect("JSON");
    assert!(!json.contains(BULK), "{what}: bulk kept: {json}");
    assert_eq!(
        trimmed(trim.clone()),
        trim,
        "{what}: trimming twice changes nothing"
    );
}

#[test]
fn every_test_pod_decides_and_resolves_the_same_trimmed() {
    let pods = test_pods();
    assert!(pods.len() > 150, "{}", pods.len());
    for (i, pod) in pods.iter().enumerate() {
        assert_same(&format!("test pod {i}"), pod);
    }
}

#[test]
fn every_kube_inject_manifest_decides_and_resolves_the_same_trimmed() {
    for (name, pod) in manifest_pods() {
        assert_same(&name, &pod);
        assert_same(
            &format!("{name}, running"),
            &with_status(pod, &["10.1.2.3"]),
        );
    }
}

#[test]
fn a_read_field_trimmed_away_is_noticed() {
    // The check itself: an annotation the policy reads, dropped, changes what it gives.
    let pod = annotate(injected(), EXCLUDE_OUTBOUND_PORTS, "5432");
    let mut lost = trimmed(pod.clone());
    lost.metadata.annotations = None;
    assert_ne!(
        format!("{:?}", policy(&lost, None).ok()),
        format!("{:?}", policy(&pod, None).ok())
    );
}
