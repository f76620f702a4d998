//! `redirect-cni`: a chained CNI plugin (CNI 0.3.0 to 1.1.0) that hands each pod to the redirect
//! daemon, which enrolls its netns before ADD returns; any failure to capture a meshed pod is
//! a CNI error (fail closed, the kubelet retries). Environment and stdin in, result on stdout.
// Every dependency of the product build is used (the test build has dev-dependencies too).
#![cfg_attr(test, allow(unused_crate_dependencies))]
mod commands;
mod conf;
#[cfg(test)]
mod conf_tests;
mod error;
mod log;
mod phases;

use std::io::Read as _;

/// What an operator who runs the plugin by hand reads (the runtime never passes arguments).
const HELP: &str = "\
redirect-cni: the chained CNI plugin of redirect. The container runtime (containerd, CRI-O)
runs it for every pod sandbox, after the primary plugin, with CNI_COMMAND (ADD, DEL, CHECK, GC,
STATUS, VERSION) in its environment and the network configuration on stdin; it hands the pod
to the redirect daemon over its socket, which enrolls a meshed pod's namespace before ADD
returns (any failure to capture a meshed pod is a CNI error: fail closed).

Not run by hand: install it with `redirect install-cni` (the DaemonSet in deploy/ does), check
a node with `redirect list` and `redirect status`, and see what a pod would get with
`redirect pod-policy FILE`.

Environment: CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS (K8S_POD_NAMESPACE,
K8S_POD_NAME, K8S_POD_UID), CNI_PATH; REDIRECT_DAEMON_DIR (the daemon's socket directory).
";

fn main() {
    let mut phases = phases::Phases::start();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        let text = format!(
            "{HELP}CNI versions: {}\n",
            conf::SUPPORTED_VERSIONS.join(", ")
        );
        // A reader that went away (`| head`) is not an error.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
        return;
    }
    if args.iter().any(|a| a == "-V" || a == "--version") {
        println!("redirect-cni {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    if command.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        // By hand at a terminal: reading stdin would wait for a configuration nobody types.
        eprint!("{HELP}");
        std::process::exit(2);
    }
    let mut stdin = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut stdin);
    phases.mark("read");
    let version = serde_json::from_slice::<serde_json::Value>(&stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .filter(|v| conf::SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".into());
    match commands::run(&command, &stdin, &version, &mut phases) {
        Ok(Some(out)) => println!("{out}"),
        Ok(None) => {}
        Err(e) => {
            tracing::error!(command, code = e.code.number(), msg = %e.msg, details = %e.details, "CNI error");
            println!("{}", e.to_json(&version));
            std::process::exit(1);
        }
    }
}
