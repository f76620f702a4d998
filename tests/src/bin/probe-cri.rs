//! `probe-cri SERIAL PARALLEL ROUNDS`: what our plugin adds to a pod's start, through
//! containerd's CRI on a node of its own (`redirect_tests::mesh`; the image under test from
//! `REDIRECT_IMAGE` and `REDIRECT_IMAGE_ARCHIVE`, which `cargo xtask bench` builds). The wall
//! time of `RunPodSandbox` of a meshed pod (the sandbox, its network: Debian's bridge +
//! host-local, then `redirect-cni` and the daemon's enrollment), first with the primary
//! conflist alone, then with the DaemonSet's pod running and our entry added; SERIAL sandboxes
//! one at a time and PARALLEL at once per round, each removed again. With our entry every
//! sandbox is checked to be enrolled, so a broken path is never measured as a fast one. One
//! JSON line per sandbox: `{"mode": "primary"|"redirect", "variant": ..., "round": N, "ms": X}`.
// A probe links every dependency of the tests package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::time::Instant;

use anyhow::{bail, Context as _};
use redirect_tests::{mesh::MeshNode, podman::image_under_test};
use serde_json::json;

fn arg(n: usize) -> anyhow::Result<usize> {
    std::env::args()
        .nth(n)
        .context("usage: probe-cri SERIAL PARALLEL ROUNDS")?
        .parse()
        .context("SERIAL, PARALLEL and ROUNDS are numbers")
}

/// Starts the sandboxes `names` at once (one alone when there is one): their times in ms.
fn start(mesh: &MeshNode, names: &[String]) -> anyhow::Result<Vec<(String, f64)>> {
    let timed = std::thread::scope(|s| {
        let started: Vec<_> = names
            .iter()
            .map(|n| {
                s.spawn(move || {
                    let t = Instant::now();
                    mesh.run_sandbox(n)
                        .map(|pod| (pod, t.elapsed().as_secs_f64() * 1000.0))
                })
            })
            .collect();
        started
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a start thread panicked"))
            })
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    let mut out = Vec::new();
    for (name, r) in names.iter().zip(timed) {
        let (pod, ms) = r.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        out.push((pod.sandbox.clone(), ms));
    }
    Ok(out)
}

fn main() -> anyhow::Result<()> {
    let (serial, parallel, rounds) = (arg(1)?, arg(2)?, arg(3)?);
    let (image, archive) = image_under_test().map_err(|e| anyhow::anyhow!(e))?;
    let mut mesh = MeshNode::new(&image, &archive);
    for mode in ["primary", "redirect"] {
        if mode == "redirect" {
            mesh.start_daemonset();
        }
        for round in 0..rounds {
            let mut batches: Vec<(String, Vec<String>)> = (0..serial)
                .map(|i| {
                    (
                        "one at a time".to_owned(),
                        vec![format!("cri-{mode}-{round}-s{i}")],
                    )
                })
                .collect();
            batches.push((
                format!("{parallel} at once"),
                (0..parallel)
                    .map(|i| format!("cri-{mode}-{round}-p{i}"))
                    .collect(),
            ));
            for (variant, names) in batches {
                let started = start(&mesh, &names)?;
                if mode == "redirect" {
                    let listed = mesh.listed();
                    for (sandbox, _) in &started {
                        if !listed
                            .iter()
                            .any(|e| e["pod"]["container_id"] == sandbox.as_str())
                        {
                            bail!("sandbox {sandbox} started but is not enrolled: {listed:?}");
                        }
                    }
                }
                for (sandbox, ms) in &started {
                    println!(
                        "{}",
                        json!({"mode": mode, "variant": variant, "round": round, "ms": ms})
                    );
                    let cri = mesh.node.cri();
                    cri.stop_pod_sandbox(sandbox)
                        .and_then(|()| cri.remove_pod_sandbox(sandbox))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
        }
    }
    Ok(())
}
