//! The flags of `install-cni` and `uninstall-cni`: where the CNI directories are, our entry's
//! fields, the state file, and the watcher's fight rule.
use std::{path::PathBuf, time::Duration};

use clap::Args;
use redirect_install::{conflist_entry, FightRule as Rule, Options, PLUGIN_NAME, STATE_FILE};

/// The CNI directories and the state file, shared by both commands.
#[derive(Debug, Clone, Args)]
pub(crate) struct Dirs {
    /// The CNI configuration directory the runtime (containerd, CRI-O) reads.
    #[arg(long, value_name = "DIR", default_value = "/etc/cni/net.d")]
    pub cni_conf_dir: PathBuf,
    /// What install-cni did, for uninstall-cni [default: CNI_CONF_DIR/.redirect-cni-install.state,
    /// a name the runtime does not read; it lasts as long as the edit it records].
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
}

impl Dirs {
    /// The state file in effect.
    pub(crate) fn state_file(&self) -> PathBuf {
        self.state_file
            .clone()
            .unwrap_or_else(|| self.cni_conf_dir.join(STATE_FILE))
    }
}

/// `install-cni`.
#[derive(Debug, Clone, Args)]
pub(crate) struct InstallCni {
    #[command(flatten)]
    pub dirs: Dirs,
    /// The CNI bin directory the plugin is copied into.
    #[arg(long, value_name = "DIR", default_value = "/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The plugin binary to copy [default: redirect-cni beside this redirect executable].
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,
    /// Our entry's daemon_socket: the daemon's socket on the node.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/run/redirect/daemon/daemon.sock"
    )]
    pub daemon_socket: String,
    /// Our entry's exclude_namespaces: pod namespaces never handed to the daemon
    /// (comma-separated; "" for none).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = redirect_daemon_api::DEFAULT_EXCLUDED_NAMESPACE
    )]
    pub exclude_namespaces: Vec<String>,
    /// Our entry's log_level: the plugin's log level in cni.log beside the socket.
    #[arg(long, value_name = "LEVEL", default_value = "info",
        value_parser = ["error", "warn", "info", "debug", "trace"])]
    pub plugin_log_level: String,
    /// Stay running: install again whenever the configuration or bin directory changes
    /// (another writer dropping our entry), within the fight rule. While the configuration
    /// chains istio-cni our entry stays out of it (taken out if it was in), and goes in at the
    /// first pass after istio-cni's entry leaves: the migration and its rollback
    /// (deploy/README.md). Without --watch such a configuration is refused.
    #[arg(long, conflicts_with = "check")]
    pub watch: bool,
    /// Change nothing: exit 0 only when the plugin binary is in place and the conflist the
    /// runtime uses (in a version the plugin speaks) holds our entry, or chains istio-cni
    /// without it (--watch stands by while istio-cni captures new pods, and puts our entry in
    /// once istio-cni's leaves) (the DaemonSet's readiness probe).
    #[arg(long)]
    pub check: bool,
    /// With --watch: on SIGTERM/SIGINT run uninstall-cni before exiting (removing the
    /// DaemonSet for good; see deploy/README.md). Without it the plugin stays installed, so
    /// new pods wait (fail closed) while the daemon is upgraded.
    #[arg(long, env = "REDIRECT_UNINSTALL_ON_EXIT")]
    pub uninstall_on_exit: bool,
    /// With --watch and without --uninstall-on-exit: at SIGTERM/SIGINT ask the apiserver
    /// whether this DaemonSet still exists and selects --node-name (an upgrade: keep the
    /// plugin, new pods wait) or is gone, being deleted or no longer selects the node (its
    /// removal: uninstall, or the node refuses every new pod); an apiserver that cannot say
    /// keeps it. The decision is logged with its reason.
    #[arg(long, value_name = "NAMESPACE/NAME", requires = "node_name",
        value_parser = redirect_daemon::parse_dns_service)]
    pub daemonset: Option<(String, String)>,
    /// This node (with --daemonset).
    #[arg(long, value_name = "NAME", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// With --daemonset outside a cluster: the kubeconfig (in-cluster config wins when
    /// KUBERNETES_SERVICE_HOST is set).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// With --watch: seconds between two passes when no change is reported (a missed event,
    /// a directory that does not exist yet).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub poll_interval: u64,
    /// The fight rule: re-insertions allowed within --fight-window ...
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub fight_limit: u32,
    /// ... seconds; one more needed within it is not made: an error is logged and
    /// re-insertion slows down for --fight-backoff seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 60,
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub fight_window: u64,
    /// Seconds re-insertion stays slow after a fight.
    #[arg(long, value_name = "SECONDS", default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub fight_backoff: u64,
    /// Meanwhile, at most one re-insertion every SECONDS, each logged as an alarm (never
    /// none: while our entry is out, new pods start uncaptured until the daemon's reconcile
    /// enrolls them).
    #[arg(long, value_name = "SECONDS", default_value_t = 30,
        value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub fight_slow: u64,
}

impl InstallCni {
    /// The library's options; the default plugin is found beside this executable.
    pub(crate) fn options(&self) -> anyhow::Result<Options> {
        use anyhow::Context as _;
        let plugin = match &self.plugin {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .context(
                    "finding this executable (to find redirect-cni beside it): pass --plugin PATH",
                )?
                .with_file_name(PLUGIN_NAME),
        };
        let exclude: Vec<String> = self
            .exclude_namespaces
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        Ok(Options {
            bin_dir: self.cni_bin_dir.clone(),
            conf_dir: self.dirs.cni_conf_dir.clone(),
            plugin,
            entry: conflist_entry(&self.daemon_socket, &exclude, &self.plugin_log_level),
            state_file: self.dirs.state_file(),
            plugin_versions: redirect_daemon_api::SUPPORTED_CNI_VERSIONS
                .map(str::to_owned)
                .to_vec(),
        })
    }

    /// The fight rule.
    pub(crate) fn rule(&self) -> Rule {
        Rule {
            limit: self.fight_limit,
            window: Duration::from_secs(self.fight_window),
            backoff: Duration::from_secs(self.fight_backoff),
            slow: Duration::from_secs(self.fight_slow),
        }
    }
}
