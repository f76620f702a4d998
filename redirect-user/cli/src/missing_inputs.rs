//! Inputs that come from the target's own files (its resolv.conf, its passwd) and are missing:
//! every one is named at once, each with its fix in the syntax of the command typed
//! (`istio-iptables` takes flags; `enroll` and `vm` take them inside `--istio-args`/`--args`).
use anyhow::bail;
use redirect_policy::{Invocation, PolicyError};

/// How the command typed is asked for the missing inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asking {
    /// The command, for the example.
    pub command: &'static str,
    /// The flag the istio-iptables flags go inside, if any (`--args`, `--istio-args`).
    pub inside: Option<&'static str>,
    /// What the target is called (`pod`, `VM`).
    pub subject: &'static str,
    /// A VM's files are this host's own (`redirect vm`).
    pub vm: bool,
}

impl Asking {
    /// `redirect istio-iptables`: the flags themselves.
    pub(crate) const ISTIO_IPTABLES: Asking = Asking {
        command: "redirect istio-iptables",
        inside: None,
        subject: "pod",
        vm: false,
    };
    /// `redirect enroll`: inside `--istio-args`.
    pub(crate) const ENROLL: Asking = Asking {
        command: "redirect enroll --netns NS",
        inside: Some("--istio-args"),
        subject: "pod",
        vm: false,
    };
    /// `redirect vm`: inside `--args`.
    pub(crate) const VM: Asking = Asking {
        command: "redirect vm --cluster-env FILE",
        inside: Some("--args"),
        subject: "VM",
        vm: true,
    };

    fn fix(self, flags: &str) -> String {
        match self.inside {
            Some(inside) => format!("add {flags} to {inside}"),
            None => format!("pass {flags}"),
        }
    }
}

/// The invocation of `argv`; when inputs from the target's files are missing, one error names
/// every one of them, each with its fix for the command typed.
pub(crate) fn resolve(argv: &[String], asking: &Asking) -> anyhow::Result<Invocation> {
    let mut argv = argv.to_vec();
    let mut missing: Vec<String> = Vec::new();
    let mut examples: Vec<&str> = Vec::new();
    // Each missing input is stood in for once, to find the next one; at most one per kind.
    for _ in 0..3 {
        let err = match crate::istio_args::parse_for(&argv, asking.vm) {
            Ok(inv) if missing.is_empty() => return Ok(inv),
            Ok(_) => break,
            Err(e) => e,
        };
        let Some(PolicyError::PodFile { needed, lookup, .. }) = err.downcast_ref::<PolicyError>()
        else {
            return Err(err);
        };
        let (flags, example, stand_in): (&str, &str, &[&str]) = if needed.contains("-u/--proxy-uid")
        {
            (
                "-u UID (istio's default is 1337)",
                "-u 1337",
                &["-u", "1337"],
            )
        } else if needed.contains("nameservers") {
            (
                "--dns-servers LIST (its DNS servers, e.g. the cluster DNS) or --capture-all-dns",
                "--dns-servers 10.96.0.10",
                &["--dns-servers", "192.0.2.1"],
            )
        } else {
            return Err(err);
        };
        let subject = format!("the {}'s", asking.subject);
        missing.push(format!(
            "{}, and {lookup}: {}",
            needed.replace("the pod's", &subject),
            asking.fix(flags)
        ));
        examples.push(example);
        argv.extend(stand_in.iter().map(|s| (*s).to_owned()));
    }
    let example = match asking.inside {
        Some(inside) => format!("{} {inside} \"{}\"", asking.command, examples.join(" ")),
        None => format!("{} {} ...", asking.command, examples.join(" ")),
    };
    bail!(
        "{} needs {} more input(s):\n  {}\ne.g. {example}",
        asking.command.split(" --").next().unwrap_or(asking.command),
        missing.len(),
        missing.join("\n  ")
    )
}

/// Says once where values no flag gave came from (`note: proxy uid 1337 (no -u): ...`).
pub(crate) fn say_notes(inv: &Invocation) {
    for n in &inv.notes {
        println!("note: {n}");
    }
}

/// A recorded source with the notes beside it, so `list` shows them too.
pub(crate) fn with_notes(source: String, notes: &[String]) -> String {
    if notes.is_empty() {
        source
    } else {
        format!("{source} [{}]", notes.join("; "))
    }
}
