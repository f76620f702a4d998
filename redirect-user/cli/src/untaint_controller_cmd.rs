//! `redirect untaint-controller`: its flags and help; the controller itself is
//! `redirect_daemon::run_untaint_controller`.
use std::path::PathBuf;

use clap::Args;
use redirect_daemon::{parse_taint, run_untaint_controller, Taint, UntaintControllerOptions};

/// `untaint-controller --help`'s closing text.
pub(crate) const HELP: &str = "\
What it watches: the DaemonSet's pods only (--selector in --namespace). When one is Ready
(condition Ready=True: the daemon answers and install-cni's probe found the plugin and our
entry in place) and scheduled (spec.nodeName), it removes --taint from that Node: a GET, then a
merge patch of the Node's taints less this one carrying the resourceVersion read (read and
tried again on a 409 Conflict; a failure again every 5 s while the pod stays Ready). Every
other taint stays; a Node without the taint gets no PATCH.

RBAC it needs (deploy/kubernetes/untaint-controller.yaml): pods get, list, watch in
--namespace (a Role), nodes get and patch (a ClusterRole: the only nodes patch of deploy/,
held by one Deployment's ServiceAccount and not by every node's daemon). Run one replica; it
must tolerate the taint it removes (else, every node tainted, it is never scheduled).

Examples:
  # In the cluster (the Deployment of untaint-controller.yaml):
  redirect untaint-controller
  # From outside, another taint:
  redirect untaint-controller --kubeconfig ~/.kube/config --taint example.com/cni:NoSchedule";

/// `untaint-controller`'s flags.
#[derive(Debug, Clone, Args)]
pub(crate) struct UntaintController {
    /// The readiness taint to remove (KEY:EFFECT; the value is not compared).
    #[arg(long, value_name = "KEY:EFFECT", default_value = redirect_daemon::DEFAULT_TAINT, value_parser = parse_taint)]
    pub taint: Taint,
    /// The DaemonSet's namespace (where its pods are watched).
    #[arg(long, value_name = "NAMESPACE", default_value = "istio-system")]
    pub namespace: String,
    /// The label selector of the DaemonSet's pods (daemonset.yaml's pods carry app=redirect).
    #[arg(long, value_name = "SELECTOR", default_value = "app=redirect")]
    pub selector: String,
    /// A kubeconfig, used outside a cluster (in-cluster config wins when
    /// KUBERNETES_SERVICE_HOST is set).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

/// Runs the controller until SIGTERM or SIGINT.
pub(crate) fn run(args: &UntaintController) -> anyhow::Result<()> {
    run_untaint_controller(&UntaintControllerOptions {
        taint: args.taint.clone(),
        namespace: args.namespace.clone(),
        selector: args.selector.clone(),
        kubeconfig: args.kubeconfig.clone(),
    })?;
    Ok(())
}
