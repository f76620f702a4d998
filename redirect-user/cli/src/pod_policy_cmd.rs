//! `redirect pod-policy FILE`: istio-cni's decision and policy for a manifest's pods beside their
//! istio-init arguments, or `--migrate` to the istio-cni form.

use std::io::Read as _;
use std::net::IpAddr;
use std::path::Path;

use anyhow::{bail, Context as _};
use redirect_k8s::{
    compare, documents, istio_init_args, istio_init_policy, migrate, Comparison, Document,
};
use redirect_k8s::{decide, istio_iptables_args, policy, Decision};
use redirect_policy::{describe_policy, Policy};
use serde::Serialize;

/// `--help`'s closing text.
pub(crate) const HELP: &str = "\
How a pod is decided (istio-cni's rules, first match wins):
  hostNetwork: true                           skipped: never captured
  istio.io/dataplane-mode=ambient             skipped: ztunnel's (label or annotation)
  an istio-init container                     skipped: it installs iptables itself
  istio-proxy env DISABLE_ENVOY=true          skipped
  no istio-proxy container (nor an init container istio-proxy with restartPolicy Always)
  istio-proxy args `proxy X`, X not sidecar   skipped (a gateway)
  sidecar.istio.io/inject=false               skipped (the label beats the annotation)
  no sidecar.istio.io/status annotation       skipped: not injected
  otherwise                                   meshed

The policy is built as istio-cni builds istio-iptables' arguments, then parsed by the same
parser as `redirect istio-iptables`: sidecar.istio.io/interceptionMode (-m; else the
proxy's ISTIO_META_INTERCEPTION_MODE), traffic.sidecar.istio.io/includeOutboundIPRanges
(-i, default *), excludeOutboundIPRanges (-x), includeInboundPorts (-b, default *),
excludeInboundPorts (-d, default 15020; 15020, 15021, 15090 and the proxy's status port
always added), includeOutboundPorts (-q), excludeOutboundPorts (-o, default 15020),
excludeInterfaces (-c), istio.io/reroute-virtual-interfaces or the older
traffic.sidecar.istio.io/kubevirtInterfaces (-k), istio-proxy's runAsUser/runAsGroup
(-u/-g; the pod's as fallback; 0 or none: 1337), and its env ISTIO_META_DNS_CAPTURE
(DNS capture to the servers its dnsPolicy/dnsConfig give, with --cluster-dns for
ClusterFirst), ISTIO_DUAL_STACK or an IPv6 status.podIPs (dual stack), INVALID_DROP.

A manifest with istio-init is decided as it is (skipped: istio-init present), then as it
would be injected with istio-cni (what --migrate prints); that pod's policy is compared with
istio-init's arguments field by field. Exit status 1 when any field differs (each is
named); istio-cni's own extra exclusion of port 15020 is shown but is not a difference.

Examples:
  redirect pod-policy deploy.yaml                 # decision, policy, comparison
  redirect pod-policy deploy.yaml --json
  redirect pod-policy deploy.yaml --migrate > cni.yaml
  kubectl get pod web-0 -o yaml | redirect pod-policy - --cluster-dns 10.96.0.10";

/// What one pod of the manifest gives.
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    document: usize,
    kind: String,
    name: String,
    /// The pod as written.
    decision: Decision,
    /// The pod as injected with istio-cni (only when istio-init was there).
    migrated_decision: Option<Decision>,
    /// What istio-cni would run: `istio-iptables ARGS`.
    istio_cni_args: Vec<String>,
    policy: Policy,
    istio_init_args: Option<Vec<String>>,
    istio_init_policy: Option<Policy>,
    comparison: Option<Comparison>,
    /// Annotation keys under Istio's sidecar prefixes (and ours, `redirect.dev/`) that neither
    /// defines (ignored).
    warnings: Vec<redirect_k8s::UnknownKey>,
    /// `redirect.dev/reset-uncaptured: "true"`: the pod's connections outside capture are reset
    /// (with the daemon's `--reset-uncaptured`, every pod's are).
    reset_uncaptured: bool,
    /// What happens to the pod's istio-validation init container (Istio's, with istio-cni)
    /// under its binding; none when it has none.
    istio_validation: Option<&'static str>,
}

pub(crate) fn run(
    file: &Path,
    json: bool,
    migrate: bool,
    cluster_dns: Option<IpAddr>,
) -> anyhow::Result<()> {
    let text = read(file)?;
    let shown = file.display();
    let docs = documents(&text).with_context(|| format!("reading {shown}"))?;
    if migrate {
        // The manifest's own text, edited where istio-init was: quoting, comments and
        // document separators stay as written.
        let (out, fell_back) =
            redirect_k8s::migrate_text(&text).with_context(|| format!("migrating {shown}"))?;
        for n in fell_back {
            eprintln!(
                "warning: {shown}: document {n} could not be edited in place (flow style?): \
                printed from its parsed value, without its comments and quoting"
            );
        }
        return emit(&out);
    }
    let mut reports = Vec::new();
    for d in &docs {
        if let Some(r) = report(d, cluster_dns).with_context(|| format!("{shown}: {}", what(d)))? {
            reports.push(r);
        }
    }
    if reports.is_empty() {
        let kinds: Vec<&str> = docs.iter().map(Document::kind).collect();
        bail!("{shown} has no Pod or workload with a pod template (its kinds: {kinds:?})");
    }
    if json {
        emit(&format!("{}\n", serde_json::to_string_pretty(&reports)?))?;
    } else {
        emit(&reports.iter().map(render).collect::<String>())?;
    }
    let differ: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            let c = r.comparison.as_ref().filter(|c| !c.agree())?;
            let fields: Vec<&str> = c.differences.iter().map(|d| d.field.as_str()).collect();
            Some(format!(
                "document {} ({} {}): {}",
                r.document,
                r.kind,
                r.name,
                fields.join(", ")
            ))
        })
        .collect();
    if !differ.is_empty() {
        bail!(
            "the policy istio-cni's path gives differs from istio-init's arguments in {}",
            differ.join("; ")
        );
    }
    Ok(())
}

/// Write to stdout; a reader that went away (`| head`) ends the output quietly.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing standard output"),
    }
}

fn read(file: &Path) -> anyhow::Result<String> {
    if file == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("reading standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))
}

fn what(d: &Document) -> String {
    format!("document {} ({} {})", d.number, d.kind(), d.name())
}

fn report(d: &Document, cluster_dns: Option<IpAddr>) -> anyhow::Result<Option<Report>> {
    let Some(pod) = d.pod()? else {
        return Ok(None);
    };
    let decision = decide(&pod);
    let warnings = redirect_k8s::unknown_keys(&pod);
    for w in &warnings {
        eprintln!("warning: {}: {w}", what(d));
    }
    let init_args = istio_init_args(&pod);
    let (target, migrated_decision) = match init_args {
        Some(_) => {
            let mut m = d.clone();
            migrate(&mut m)?;
            let p = m.pod()?.context("the migrated document lost its pod")?;
            let decided = decide(&p);
            (p, Some(decided))
        }
        None => (pod, None),
    };
    let istio_cni_args = istio_iptables_args(&target, cluster_dns)?;
    let policy = policy(&target, cluster_dns)?;
    let istio_init_policy = match &init_args {
        Some(a) => Some(istio_init_policy(a).context("istio-init's arguments")?),
        None => None,
    };
    let comparison = istio_init_policy.as_ref().map(|i| compare(&policy, i));
    let istio_validation = redirect_k8s::has_istio_validation(&target)
        .then(|| redirect_k8s::validation_under(policy.proxy_bypass_closed));
    Ok(Some(Report {
        document: d.number,
        kind: d.kind().to_owned(),
        name: d.name().to_owned(),
        decision,
        migrated_decision,
        istio_cni_args,
        policy,
        istio_init_args: init_args,
        istio_init_policy,
        comparison,
        warnings,
        reset_uncaptured: redirect_k8s::reset_uncaptured(&target),
        istio_validation,
    }))
}

/// The arguments as one line a shell splits back into them (as `list` shows a source).
fn args_line(args: &[String]) -> String {
    crate::node_cmds::join_args(args)
}

fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    _ = writeln!(o, "document {}: {} {}", r.document, r.kind, r.name);
    _ = writeln!(o, "  decision           {}", r.decision);
    for w in &r.warnings {
        _ = writeln!(o, "  WARNING            {w}");
    }
    if let Some(v) = r.istio_validation {
        _ = writeln!(o, "  istio-validation   {v}");
    }
    if let Some(m) = &r.migrated_decision {
        _ = writeln!(
            o,
            "  with istio-cni     {m} (istio-init -> istio-validation, as --migrate prints it)"
        );
    }
    _ = writeln!(
        o,
        "  istio-cni runs     istio-iptables {}",
        args_line(&r.istio_cni_args)
    );
    if let Some(a) = &r.istio_init_args {
        _ = writeln!(o, "  istio-init runs    istio-iptables {}", args_line(a));
    }
    _ = writeln!(o, "  policy:");
    for line in describe_policy(&r.policy, r.policy.dual_stack) {
        // The daemon's flag makes every pod strict; the manifest alone cannot say it.
        let daemon_wide = !r.policy.proxy_bypass_closed && line.starts_with("proxy binding ");
        let also = if daemon_wide {
            " (strict if the daemon runs with --strict-proxy-binding)"
        } else {
            ""
        };
        _ = writeln!(o, "    {line}{also}");
    }
    _ = writeln!(
        o,
        "    reset uncaptured       {}",
        if r.reset_uncaptured {
            "yes (redirect.dev/reset-uncaptured)"
        } else {
            "no (unless the daemon runs with --reset-uncaptured)"
        }
    );
    let Some(c) = &r.comparison else {
        _ = writeln!(o, "  no istio-init container: nothing to compare");
        return o;
    };
    for d in &c.istio_cni_only {
        _ = writeln!(
            o,
            "  istio-cni's own    {}: {} (istio-init {}): istio-cni also excludes 15020",
            d.field, d.ours, d.istio_init
        );
    }
    if c.agree() {
        _ = writeln!(o, "  agrees with istio-init's arguments");
    }
    for d in &c.differences {
        _ = writeln!(
            o,
            "  DIFFERS            {}: ours {}, istio-init {}",
            d.field, d.ours, d.istio_init
        );
    }
    o
}
