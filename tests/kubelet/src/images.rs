//! Images built here, nothing pulled: busybox-static images (the pause image every sandbox
//! runs, an application image with busybox's applets) made with buildah FROM scratch in a
//! storage of their own and written as OCI archives for `ctr images import`.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context as _};

/// The application image: busybox-static and its applets (`sh`, `nc`, `sleep`, ...).
pub const APP_IMAGE: &str = "localhost/redirect-test/busybox:1";

fn buildah(storage: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("buildah")
        .arg("--root")
        .arg(storage.join("root"))
        .arg("--runroot")
        .arg(storage.join("runroot"))
        .args(["--storage-driver", "vfs"])
        .args(args)
        .output()
        .context("starting buildah (cargo xtask setup installs it)")?;
    ensure!(
        out.status.success(),
        "buildah {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Builds `tag`, busybox-static at `/bin/busybox` with `applets` linked to it and `entrypoint`,
/// into the OCI archive `DIR/<name>.tar` (`storage` is buildah's, under `dir`).
fn busybox_image(
    dir: &Path,
    tag: &str,
    applets: &[&str],
    entrypoint: &[&str],
) -> anyhow::Result<PathBuf> {
    let storage = dir.join("buildah");
    let rootfs = dir.join(format!("rootfs-{}", tag.replace(['/', ':'], "-")));
    let bin = rootfs.join("bin");
    std::fs::create_dir_all(&bin).context("the image's rootfs")?;
    std::fs::copy("/bin/busybox", bin.join("busybox"))
        .context("copying /bin/busybox (busybox-static)")?;
    for applet in applets {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).context("an applet link")?;
    }
    let working = buildah(&storage, &["from", "scratch"])?;
    let built = (|| {
        buildah(
            &storage,
            &["copy", &working, &rootfs.display().to_string(), "/"],
        )?;
        let entry = serde_json::to_string(entrypoint).context("the entrypoint")?;
        buildah(
            &storage,
            &[
                "config",
                "--entrypoint",
                &entry,
                "--env",
                "PATH=/bin",
                &working,
            ],
        )?;
        buildah(&storage, &["commit", "--quiet", &working, tag])?;
        let archive = dir.join(format!("{}.tar", tag.replace(['/', ':'], "-")));
        buildah(
            &storage,
            &[
                "push",
                "--quiet",
                tag,
                &format!("oci-archive:{}:{tag}", archive.display()),
            ],
        )?;
        Ok(archive)
    })();
    let _ = buildah(&storage, &["rm", &working]);
    built
}

/// The pause image and the application image, as OCI archives under `dir`.
pub fn build(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let pause = busybox_image(
        dir,
        crate::config::PAUSE_IMAGE,
        &[],
        &["/bin/busybox", "sleep", "2147483647"],
    )?;
    let app = busybox_image(
        dir,
        APP_IMAGE,
        &["sh", "nc", "sleep", "echo", "cat", "wget", "true"],
        &["/bin/sh"],
    )?;
    Ok(vec![pause, app])
}
