//! Test pods: an injected native-sidecar pod, changed one field at a time.

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};

const BASE: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  annotations:
    sidecar.istio.io/status: '{"initContainers":["istio-proxy"],"containers":null}'
spec:
  containers:
  - name: app
    image: app
    ports:
    - containerPort: 8080
  initContainers:
  - name: istio-proxy
    image: proxyv2
    restartPolicy: Always
    args: [proxy, sidecar, --domain, cluster.local]
    securityContext:
      runAsUser: 1337
      runAsGroup: 1337
"#;

/// The base pod: meshed, every default.
pub(crate) fn injected() -> Pod {
    serde_norway::from_str(BASE).expect("the base test pod decodes")
}

pub(crate) fn annotate(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    pod
}

pub(crate) fn label(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    pod
}

/// The istio-proxy container of the base pod.
pub(crate) fn proxy_mut(pod: &mut Pod) -> &mut Container {
    let spec = pod.spec.as_mut().expect("spec");
    let inits = spec.init_containers.as_mut().expect("init containers");
    inits
        .iter_mut()
        .find(|c| c.name == "istio-proxy")
        .expect("istio-proxy")
}

pub(crate) fn proxy_env(mut pod: Pod, name: &str, value: &str) -> Pod {
    proxy_mut(&mut pod)
        .env
        .get_or_insert_with(Vec::new)
        .push(EnvVar {
            name: name.into(),
            value: Some(value.into()),
            value_from: None,
        });
    pod
}

/// A plain container named `name` added to the pod's containers.
pub(crate) fn with_container(mut pod: Pod, name: &str, init: bool) -> Pod {
    let c = Container {
        name: name.into(),
        ..Default::default()
    };
    let spec = pod.spec.as_mut().expect("spec");
    if init {
        spec.init_containers
            .get_or_insert_with(Vec::new)
            .insert(0, c);
    } else {
        spec.containers.push(c);
    }
    pod
}
