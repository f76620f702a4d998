//! Loads the embedded BPF object, configures it, attaches it to cgroups and detaches it on drop.
use redirect_common::NetnsCookie;
use std::{net::IpAddr, path::PathBuf};

use aya::{maps::MapData, Ebpf, EbpfLoader};
use aya_log::EbpfLogger;
use serde::{Deserialize, Serialize};

use ipnet::IpNet;
use redirect_policy::{Cidrs, InboundPorts, InboundSpec, Policy};

use crate::{
    attach::plan::{self, Attachment, Link},
    cgroup,
    error::{Error, Result},
    load::object,
    load::preflight,
    maps::outbound,
};

/// What `redirect attach` was asked to do, after validation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachOptions {
    /// Cgroup whose processes' outbound connects are captured.
    pub cgroup: PathBuf,
    /// Cgroup under which the proxy's listener lives; `None` means the cgroup v2 root.
    pub proxy_cgroup: Option<PathBuf>,
    /// Uid whose connects are never captured.
    pub proxy_uid: u32,
    /// Gid whose connects are never captured.
    pub proxy_gid: u32,
    /// Port on 127.0.0.1 that captured connects go to.
    pub outbound_port: u16,
    /// Most verbose aya-log level the BPF programs emit: 0 off, 1 error, 2 warn, 3 info,
    /// 4 debug, 5 trace. Records are forwarded to `tracing` (target `redirect_ebpf::...`).
    pub bpf_log_level: u8,
    /// Network namespaces whose inbound connections are steered to their proxy.
    #[serde(default)]
    pub inbound: Vec<InboundSpec>,
    /// Outbound IPv4 destinations never captured (istio-iptables -x).
    #[serde(default)]
    pub exclude_cidrs: Vec<ipnet::Ipv4Net>,
    /// Connections in hand-off at once (`--max-connections`): the connection maps' size.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
}

fn default_max_connections() -> u32 {
    crate::sizing::DEFAULT_MAX_CONNECTIONS
}

/// A namespace whose inbound connections are steered.
#[derive(Debug, Clone, Serialize)]
pub struct Enrolled {
    /// What was asked.
    pub(crate) spec: InboundSpec,
    /// Its netns cookie.
    pub(crate) cookie: NetnsCookie,
    /// Its own addresses, as last synchronised into `POD_ADDRS`.
    pub(crate) addrs: Vec<IpAddr>,
}

impl AttachOptions {
    /// `attach`'s flags as the istio-iptables policy they stand for: istio's defaults with
    /// `-p PORT -u UID -g GID -i '*' -x CIDRS -b ''` (inbound capture is per `--inbound`).
    pub(crate) fn policy(&self) -> Policy {
        Policy {
            proxy_port: self.outbound_port,
            proxy_uids: vec![self.proxy_uid],
            proxy_gids: vec![self.proxy_gid],
            include_cidrs: Cidrs::All,
            exclude_cidrs: self.exclude_cidrs.iter().map(|n| IpNet::V4(*n)).collect(),
            inbound_ports: InboundPorts::List(Vec::new()),
            ..Policy::default()
        }
    }
}

/// A loaded and attached datapath: the links of [`plan::cgroup_plan`] (and sk_lookup per
/// enrolled namespace) held by this process. Dropping it detaches everything in the reverse
/// order of attaching (capture first: sk_lookup and connect4/6, then tracking).
pub struct AttachDatapath {
    pub(crate) ebpf: Ebpf,
    logger: Option<EbpfLogger<&'static dyn log::Log>>,
    pub(crate) ebpf_enrolled: Vec<Enrolled>,
    /// Each enrolled namespace's descriptor, in `ebpf_enrolled`'s order (followed through it).
    pub(crate) ebpf_netns: Vec<crate::netns::NetnsHandle>,
    /// Links in attach order.
    pub(crate) links: Vec<Link>,
    attachments: Vec<Attachment>,
    options: AttachOptions,
    /// The sk_lookup program this kernel loads (with or without `ingress_ifindex`).
    pub(crate) sk_lookup: &'static str,
}

impl std::fmt::Debug for AttachDatapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachDatapath")
            .field("attachments", &self.attachments)
            .field("options", &self.options)
            .field("logger", &self.logger.is_some())
            .field("sk_lookup", &self.sk_lookup)
            .finish_non_exhaustive()
    }
}

impl AttachDatapath {
    /// Validates, loads and attaches. On any error nothing stays attached.
    pub fn attach(options: &AttachOptions) -> Result<Self> {
        preflight::require_root()?;
        let app_cgroup = cgroup::validate(&options.cgroup)?;
        let proxy_cgroup = match &options.proxy_cgroup {
            Some(p) => cgroup::validate(p)?,
            None => cgroup::validate(&cgroup::cgroup2_root()?)?,
        };
        let probed = preflight::require_kernel_support()?;
        let object = object::bpf_object().ok_or(Error::NoObject)?;
        // Sized as a node of 110 pods (or one per --inbound namespace, if more); one box has no
        // per-namespace hand-off quota: the default policy may use the whole connection map.
        let sizing = crate::sizing::Quotas {
            max_pods: 110.max(u32::try_from(options.inbound.len()).unwrap_or(u32::MAX)),
            ..Default::default()
        }
        .with_connections(options.max_connections);
        let quota = u64::from(
            options
                .max_connections
                .saturating_sub(crate::sizing::HANDOFF_SLACK)
                .max(1),
        );
        let mut loader = EbpfLoader::new();
        loader
            .override_global("AYA_LOG_LEVEL", &options.bpf_log_level, false)
            .override_global(redirect_common::HANDOFF_QUOTA_GLOBAL, &quota, true);
        for (name, size) in sizing.map_sizes() {
            loader.map_max_entries(name, size);
        }
        let mut ebpf = loader.load(object).map_err(|e| Error::Load(Box::new(e)))?;
        let logger = match EbpfLogger::init(&mut ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "BPF log records unavailable");
                None
            }
        };

        // The default policy (netns key 0) applies to every namespace without its own; it
        // goes through the same compile as every istio-iptables policy.
        let compiled = outbound::compile(&options.policy(), false, Vec::new())?;
        outbound::write(&mut ebpf, NetnsCookie::DEFAULT, &compiled)?;

        let mut dp = Self {
            ebpf,
            logger,
            ebpf_enrolled: Vec::new(),
            ebpf_netns: Vec::new(),
            links: Vec::new(),
            attachments: Vec::new(),
            options: AttachOptions {
                cgroup: app_cgroup.clone(),
                proxy_cgroup: Some(proxy_cgroup.clone()),
                ..options.clone()
            },
            // `attach --inbound` has no interface rules, so either program serves it.
            sk_lookup: crate::load::probe::sk_lookup_program(&probed),
        };
        // Verified all at once (in parallel), then the node datapath's plan, links held by
        // this process instead of pinned. sk_lookup only when a namespace is given.
        let mut names = plan::programs(dp.sk_lookup);
        if options.inbound.is_empty() {
            names.pop();
        }
        plan::load_all(&mut dp.ebpf, &names)?;
        for link in plan::link_cgroups(&mut dp.ebpf, &app_cgroup, &proxy_cgroup)? {
            dp.hold(link);
        }
        for spec in &options.inbound {
            dp.enroll(spec)?;
        }
        tracing::info!(
            cgroup = %app_cgroup.display(),
            proxy_cgroup = %proxy_cgroup.display(),
            proxy_uid = options.proxy_uid,
            proxy_gid = options.proxy_gid,
            outbound_port = options.outbound_port,
            sk_lookup = dp.sk_lookup,
            "datapath attached"
        );
        Ok(dp)
    }

    /// Keeps `link` until detach.
    pub(crate) fn hold(&mut self, link: Link) {
        self.attachments.push(link.attachment.clone());
        self.links.push(link);
    }

    /// Where each program is attached.
    pub fn attachments(&self) -> &[Attachment] {
        &self.attachments
    }

    /// The validated options (canonical cgroup paths).
    pub fn options(&self) -> &AttachOptions {
        &self.options
    }

    /// Kernel ids of the maps, by name, for `redirect status`.
    pub fn map_ids(&self) -> Vec<(String, u32)> {
        self.ebpf
            .maps()
            .filter_map(|(name, map)| {
                let data: &MapData = match map {
                    aya::maps::Map::Array(d)
                    | aya::maps::Map::PerCpuArray(d)
                    | aya::maps::Map::HashMap(d)
                    | aya::maps::Map::LruHashMap(d)
                    | aya::maps::Map::PerCpuHashMap(d)
                    | aya::maps::Map::LpmTrie(d)
                    | aya::maps::Map::RingBuf(d)
                    | aya::maps::Map::SockHash(d)
                    | aya::maps::Map::Unsupported(d) => d,
                    _ => return None,
                };
                data.info().ok().map(|i| (name.to_owned(), i.id()))
            })
            .collect()
    }

    /// File descriptor that becomes readable when BPF log records are waiting.
    pub fn log_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.logger.as_ref().map(std::os::fd::AsFd::as_fd)
    }

    /// Forwards waiting BPF log records to `tracing`.
    pub fn flush_logs(&mut self) {
        if let Some(logger) = &mut self.logger {
            logger.flush();
        }
    }

    /// Detaches every program in the reverse order of attaching: sk_lookup and connect4/6
    /// first, tracking last. Idempotent.
    pub fn detach(&mut self) {
        while let Some(link) = self.links.pop() {
            drop(link);
        }
        self.attachments.clear();
    }
}

impl Drop for AttachDatapath {
    fn drop(&mut self) {
        self.detach();
    }
}

#[cfg(test)]
mod tests {
    use redirect_common::outbound::{OUT_ENABLED, OUT_INCLUDE_ALL_V4, OUT_IPV6};

    use super::*;

    #[test]
    fn attach_flags_compile_as_an_istio_policy() {
        let opts = AttachOptions {
            cgroup: PathBuf::from("/sys/fs/cgroup/x"),
            proxy_cgroup: None,
            proxy_uid: 1500,
            proxy_gid: 1501,
            outbound_port: 15101,
            bpf_log_level: 0,
            inbound: Vec::new(),
            exclude_cidrs: vec!["10.96.1.7/12".parse().expect("cidr")],
            max_connections: 16_384,
        };
        let c = outbound::compile(&opts.policy(), false, Vec::new()).expect("compile");
        let k = c.policy;
        assert_eq!(
            (k.n_uids, k.uids[0], k.n_gids, k.gids[0]),
            (1, 1500, 1, 1501)
        );
        assert_eq!(k.proxy_port, 15101);
        assert_eq!((k.inbound_port, k.tunnel_port), (15006, 15008));
        assert_ne!(k.flags & OUT_ENABLED, 0);
        assert_ne!(k.flags & OUT_INCLUDE_ALL_V4, 0);
        assert_eq!(k.flags & OUT_IPV6, 0, "native IPv6 stays untouched");
        assert_eq!(k.loopback_v4, u32::from_ne_bytes([127, 0, 0, 1]));
        assert_eq!(k.loopback_v4_mask, u32::MAX);
        assert_eq!(
            c.exclude,
            vec!["10.96.0.0/12".parse::<IpNet>().expect("cidr")]
        );
        assert!(c.include.is_empty() && c.ports.is_empty() && c.routes.is_empty());
    }
}
