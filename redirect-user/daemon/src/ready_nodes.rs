//! The untaint controller's view of the DaemonSet's pods, from its watch's events: which nodes
//! have a Ready pod (condition `Ready=True` and a `spec.nodeName`), and which of those still
//! wait for their taint's removal. Pure: the events in, the nodes to untaint out.
use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::Event;

/// The node `pod` is Ready on: condition `Ready` is `True` and it is scheduled.
pub(crate) fn ready_on(pod: &Pod) -> Option<&str> {
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())?;
    (ready && !node.is_empty()).then_some(node)
}

fn uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}

/// Every Ready pod's node, by pod uid, and the nodes whose taint is still to be removed.
#[derive(Debug, Default)]
pub(crate) struct ReadyNodes {
    ready: HashMap<String, String>,
    /// The listing in progress (between `Init` and `InitDone`).
    listing: Option<HashMap<String, String>>,
    pending: BTreeSet<String>,
}

impl ReadyNodes {
    /// Takes one watch event in. A pod that becomes Ready puts its node in the pending set; a
    /// relist (`Init` .. `InitDone`) puts every Ready pod's node there again (the removal is
    /// idempotent: a node without the taint costs one GET).
    pub(crate) fn apply(&mut self, event: Event<Pod>) {
        match event {
            Event::Init => self.listing = Some(HashMap::new()),
            Event::InitApply(pod) => {
                if let Some(node) = ready_on(&pod) {
                    self.pending.insert(node.to_owned());
                    self.listing
                        .get_or_insert_with(HashMap::new)
                        .insert(uid(&pod), node.to_owned());
                }
            }
            Event::InitDone => self.ready = self.listing.take().unwrap_or_default(),
            Event::Apply(pod) => match ready_on(&pod) {
                Some(node) => {
                    let before = self.ready.insert(uid(&pod), node.to_owned());
                    if before.as_deref() != Some(node) {
                        self.pending.insert(node.to_owned());
                    }
                }
                None => {
                    self.ready.remove(&uid(&pod));
                }
            },
            Event::Delete(pod) => {
                self.ready.remove(&uid(&pod));
            }
        }
    }

    /// The nodes to untaint now: pending ones that still have a Ready pod (a node whose pod
    /// stopped being Ready before its turn is dropped; it comes back when one is Ready again).
    pub(crate) fn due(&mut self) -> Vec<String> {
        // During a relist the pods listed so far count too.
        let listed = self.listing.iter().flat_map(HashMap::values);
        let ready: BTreeSet<&String> = self.ready.values().chain(listed).collect();
        self.pending.retain(|n| ready.contains(n));
        self.pending.iter().cloned().collect()
    }

    /// `node`'s taint is gone (removed, or never there).
    pub(crate) fn done(&mut self, node: &str) {
        self.pending.remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, node: Option<&str>, ready: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("redirect-{uid}"), "uid": uid},
            "spec": {"containers": [], "nodeName": node},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}))
        .expect("a Pod")
    }

    #[test]
    fn only_a_ready_scheduled_pod_names_its_node_once() {
        let mut r = ReadyNodes::default();
        r.apply(Event::Init);
        r.apply(Event::InitApply(pod("a", Some("n1"), "False")));
        r.apply(Event::InitApply(pod("b", None, "True")));
        r.apply(Event::InitDone);
        assert_eq!(r.due(), Vec::<String>::new());
        r.apply(Event::Apply(pod("a", Some("n1"), "True")));
        assert_eq!(r.due(), ["n1"]);
        r.done("n1");
        // Another status update of the same Ready pod: nothing to do again.
        r.apply(Event::Apply(pod("a", Some("n1"), "True")));
        assert_eq!(r.due(), Vec::<String>::new());
        // Not Ready, then Ready again: looked at again.
        r.apply(Event::Apply(pod("a", Some("n1"), "False")));
        r.apply(Event::Apply(pod("a", Some("n1"), "True")));
        assert_eq!(r.due(), ["n1"]);
    }

    #[test]
    fn a_pod_no_longer_ready_before_its_turn_drops_its_node() {
        let mut r = ReadyNodes::default();
        r.apply(Event::Apply(pod("a", Some("n1"), "True")));
        r.apply(Event::Apply(pod("b", Some("n2"), "True")));
        r.apply(Event::Apply(pod("a", Some("n1"), "False")));
        r.apply(Event::Delete(pod("b", Some("n2"), "True")));
        assert_eq!(r.due(), Vec::<String>::new());
        // A relist names every Ready pod's node again.
        r.apply(Event::Init);
        r.apply(Event::InitApply(pod("c", Some("n3"), "True")));
        assert_eq!(r.due(), ["n3"], "due before the relist ends");
        r.apply(Event::InitDone);
        assert_eq!(r.due(), ["n3"]);
    }
}
