//! `redirect upgrade`: the pinned datapath upgraded in place to this build's programs.
use std::path::PathBuf;

use redirect_datapath::{
    build_id, lock_node, upgrade_needed, NodeDatapath, LAYOUT_VERSION, UPGRADES_FROM,
};

/// Upgrades (or with `check`, only says whether it would) the datapath pinned at `bpffs`.
pub(crate) fn upgrade(dir: PathBuf, check: bool) -> anyhow::Result<()> {
    let this = format!(
        "layout v{} build {:016x} (upgrades in place from: the same layout{})",
        LAYOUT_VERSION,
        build_id(),
        UPGRADES_FROM
            .iter()
            .map(|v| format!(", v{v}"))
            .collect::<String>()
    );
    if !NodeDatapath::exists(&dir) {
        println!(
            "nothing to upgrade: no datapath pinned at {}; this redirect is {this}",
            dir.display()
        );
        return Ok(());
    }
    let _lock = lock_node(&dir)?;
    if check {
        return match upgrade_needed(&dir)? {
            None => {
                println!("up to date: {} runs this build, {this}", dir.display());
                Ok(())
            }
            Some(old) => {
                println!(
                    "upgrade needed: {} runs layout v{} build {:016x}; this redirect is {this}",
                    dir.display(),
                    old.version,
                    old.build
                );
                std::process::exit(1);
            }
        };
    }
    match NodeDatapath::upgrade(&dir)? {
        None => println!("up to date: {} runs this build, {this}", dir.display()),
        Some(u) => {
            let carried: Vec<String> = u
                .carried
                .iter()
                .map(|(m, n)| format!("{m} ({n} entries)"))
                .collect();
            println!(
                "upgraded {} in place: layout v{} build {:016x} -> layout v{} build {:016x}; {} \
                    links and {} namespaces' sk_lookup given the new programs; {} maps kept with \
                    their state; recreated and carried over: {}; new: {}; policies of older builds \
                    completed: {}",
                dir.display(),
                u.from.0,
                u.from.1,
                u.to.0,
                u.to.1,
                u.links,
                u.namespaces,
                u.kept.len(),
                if carried.is_empty() {
                    "none".to_owned()
                } else {
                    carried.join(", ")
                },
                if u.created.is_empty() {
                    "none".to_owned()
                } else {
                    u.created.join(", ")
                },
                u.completed
            );
        }
    }
    Ok(())
}
