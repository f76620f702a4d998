//! `redirect-cni`: a chained CNI plugin (CNI 0.3.0 to 1.1.0) that hands each pod to the redirect
//! daemon, which enrolls its netns before ADD returns; any failure to capture a meshed pod is
//! a CNI error (fail closed, the kubelet retries). Environment and stdin in, result on stdout.
mod commands;
mod conf;
#[cfg(test)]
mod conf_tests;
mod error;
mod log;

use std::io::Read as _;

fn main() {
    let command = std::env::var("CNI_COMMAND").unwrap_or_default();
    let mut stdin = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut stdin);
    let version = serde_json::from_slice::<serde_json::Value>(&stdin)
        .ok()
        .and_then(|v| {
            v.get("cniVersion")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .filter(|v| conf::SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| "1.1.0".into());
    match commands::run(&command, &stdin, &version) {
        Ok(Some(out)) => println!("{out}"),
        Ok(None) => {}
        Err(e) => {
            tracing::error!(command, code = e.code.number(), msg = %e.msg, details = %e.details, "CNI error");
            println!("{}", e.to_json(&version));
            std::process::exit(1);
        }
    }
}
