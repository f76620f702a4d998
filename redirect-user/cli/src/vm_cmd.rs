//! `redirect vm`: the host (or a namespace playing the VM) with the policy of Istio's
//! cluster.env, through the daemon when one owns the pins, else straight into them. Its errors
//! speak of the VM and of `vm`'s own flags: what istio-iptables takes as flags, `vm` takes
//! inside `--args "..."`, and every missing input is named at once.
use std::path::{Path, PathBuf};

use redirect_datapath::{
    ipv6_follows, lock_node, resolve_netns, NetnsHandle, NodeAttach, NodeDatapath,
};

use crate::{
    dir_args::Dirs,
    node_cmds::{open_netns, split_args},
};

/// What `redirect vm` was given.
pub(crate) struct VmArgs<'a> {
    pub cluster_env: &'a Path,
    pub netns: Option<&'a str>,
    pub extra: Option<&'a str>,
    pub cgroup: Option<PathBuf>,
    pub dry_run: bool,
}

/// Enrolls the VM, or with `dry_run` prints what it would get.
pub(crate) fn vm(dirs: &Dirs, args: VmArgs<'_>) -> anyhow::Result<()> {
    let VmArgs {
        cluster_env,
        netns: netns_name,
        extra,
        cgroup,
        dry_run,
    } = args;
    let mut argv = vec![
        "--cluster-env".to_owned(),
        cluster_env.display().to_string(),
    ];
    if let Some(n) = netns_name {
        argv.extend(["--netns".to_owned(), n.to_owned()]);
    }
    if let Some(extra) = extra {
        argv.extend(split_args(extra)?);
    }
    let inv = crate::missing_inputs::resolve(&argv, &crate::missing_inputs::Asking::VM)?;
    crate::missing_inputs::say_notes(&inv);
    let policy = inv.policy;
    // The host is init's namespace: a path the daemon can open too (not /proc/self).
    let path = netns_name.map_or_else(
        || PathBuf::from("/proc/1/ns/net"),
        |n| resolve_netns(Some(n)),
    );
    let dir = dirs.bpffs.clone();
    if dry_run {
        let addrs = NetnsHandle::open(&path)
            .and_then(|h| h.addresses())
            .unwrap_or_default();
        print!(
            "{}",
            crate::istio::side_by_side(&policy, ipv6_follows(&policy, &addrs))
        );
        println!("(dry run: nothing applied to {})", path.display());
        return Ok(());
    }
    let source = crate::missing_inputs::with_notes(
        format!("vm --cluster-env {}", cluster_env.display()),
        &inv.notes,
    );
    if let crate::writer::NodeWriter::Daemon { pid, client } =
        crate::writer::NodeWriter::for_node(&dir)
    {
        // An explicit --cgroup must be where the daemon's datapath is attached, as with
        // istio-iptables: never silently ignored.
        if let Some(asked) = &cgroup {
            NodeDatapath::open(&dir)?.check_attach(&NodeAttach {
                cgroup: Some(asked.clone()),
                proxy_cgroup: None,
                quotas: Default::default(),
                scope: Default::default(),
            })?;
        }
        let r = client.enroll(
            &open_netns(&path)?,
            policy,
            source,
            redirect_daemon_api::Writer::Vm,
        )?;
        println!("{} (through the daemon, pid {pid})", r.message);
        return Ok(());
    }
    let _lock = lock_node(&dir)?;
    let attach = NodeAttach {
        cgroup,
        proxy_cgroup: None,
        quotas: crate::sizing_args::Sizing::from_env()?,
        scope: Default::default(),
    };
    let handle = NetnsHandle::open(&path)?;
    let replacing = crate::direct_record::replacing(dirs, &dir, handle.cookie(), &policy);
    let a = NodeDatapath::apply_at(&dir, &attach, &handle, &policy)?.applied;
    crate::direct_record::record(
        dirs,
        &dir,
        &handle,
        &policy,
        &a,
        redirect_daemon_api::Writer::Vm,
        source,
    );
    let inbound = if a.inbound {
        format!(", inbound to :{}", policy.inbound_capture_port)
    } else {
        String::new()
    };
    println!(
        "VM policy from {} applied to {} (netns cookie {}): outbound to :{}{inbound}{replacing}",
        cluster_env.display(),
        path.display(),
        a.cookie,
        policy.proxy_port,
    );
    Ok(())
}
