//! Loads the embedded BPF object, configures it, attaches it to cgroups and detaches it on drop.
use std::{
    fs::File,
    path::{Path, PathBuf},
};

use aya::{
    maps::MapData,
    programs::{
        cgroup_sock_addr::CgroupSockAddrLinkId, cgroup_sockopt::CgroupSockoptLinkId,
        sk_lookup::SkLookupLinkId, sock_ops::SockOpsLinkId, CgroupAttachMode, CgroupSockAddr,
        CgroupSockopt, SkLookup, SockOps,
    },
    Ebpf, EbpfLoader,
};
use aya_log::EbpfLogger;
use redirect_common::prog_names;
use serde::{Deserialize, Serialize};

use redirect_policy::inbound_spec::InboundSpec;

use crate::{
    bpfsys::attach_type,
    cgroup,
    enroll::Enrolled,
    error::{Error, Result},
    object, outbound, preflight,
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
}

/// One program attached at one cgroup or network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    /// Program name in the object.
    pub program: String,
    /// Attach type as bpftool names it.
    pub attach_type: String,
    /// Canonical cgroup directory, or network namespace file for sk_lookup.
    pub target: PathBuf,
    /// Kernel program id.
    pub program_id: u32,
}

/// Loads (once) and attaches program `$name` of type `$ty` at `$cgroup`, recording the link
/// id in `self.$ids` (or yielding it, without `$ids`). The program types share no trait, hence a macro.
macro_rules! attach_program {
    ($self:ident, $ty:ty, $name:expr, $hook:expr, $cgroup:expr, $ids:ident) => {{
        let id = attach_program!($self, $ty, $name, $hook, $cgroup);
        $self.$ids.push(id);
        Ok(())
    }};
    ($self:ident, $ty:ty, $name:expr, $hook:expr, $cgroup:expr) => {{
        let name: &'static str = $name;
        let prog: &mut $ty = program(&mut $self.ebpf, name)?;
        if prog.info().is_err() {
            prog.load().map_err(|source| Error::Verify {
                name,
                source: Box::new(source),
            })?;
        }
        let id = prog
            .attach(open_cgroup($cgroup)?, CgroupAttachMode::Single)
            .map_err(|source| attach_error(name, $cgroup, source))?;
        $self.record(name, $hook, $cgroup);
        id
    }};
}

/// Detaches every link in `self.$ids` of program `$name`, keeping the first error.
macro_rules! detach_programs {
    ($self:ident, $ty:ty, $name:expr, $ids:ident, $first_error:ident) => {
        if let Some(prog) = $self
            .ebpf
            .program_mut($name)
            .and_then(|p| <&mut $ty>::try_from(p).ok())
        {
            for id in $self.$ids.drain(..) {
                if let Err(e) = prog.detach(id) {
                    $first_error.get_or_insert(e);
                }
            }
        }
    };
}

/// The UDP and peer-address hooks: (program, hook name, bpf attach type).
pub const PEER_HOOKS: [(&str, &str, u32); 6] = [
    (prog_names::SENDMSG4, "sendmsg4", attach_type::SENDMSG4),
    (prog_names::SENDMSG6, "sendmsg6", attach_type::SENDMSG6),
    (prog_names::RECVMSG4, "recvmsg4", attach_type::RECVMSG4),
    (prog_names::RECVMSG6, "recvmsg6", attach_type::RECVMSG6),
    (
        prog_names::GETPEERNAME4,
        "getpeername4",
        attach_type::GETPEERNAME4,
    ),
    (
        prog_names::GETPEERNAME6,
        "getpeername6",
        attach_type::GETPEERNAME6,
    ),
];

/// A loaded and attached datapath. Dropping it detaches everything (capture first: sk_lookup
/// and connect4, then tracking).
pub struct Datapath {
    pub(crate) ebpf: Ebpf,
    logger: Option<EbpfLogger<&'static dyn log::Log>>,
    pub(crate) ebpf_enrolled: Vec<Enrolled>,
    pub(crate) sk_lookup: Vec<SkLookupLinkId>,
    /// connect4/6, sendmsg, recvmsg and getpeername links, by program name.
    sock_addr: Vec<(&'static str, CgroupSockAddrLinkId)>,
    sock_ops: Vec<SockOpsLinkId>,
    getsockopt: Vec<CgroupSockoptLinkId>,
    attachments: Vec<Attachment>,
    options: AttachOptions,
}

impl std::fmt::Debug for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datapath")
            .field("attachments", &self.attachments)
            .field("options", &self.options)
            .field("logger", &self.logger.is_some())
            .finish_non_exhaustive()
    }
}

fn open_cgroup(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::io("opening cgroup", path, e))
}

impl Datapath {
    /// Validates, loads and attaches. On any error nothing stays attached.
    pub fn attach(options: &AttachOptions) -> Result<Self> {
        preflight::require_root()?;
        let app_cgroup = cgroup::validate(&options.cgroup)?;
        let proxy_cgroup = match &options.proxy_cgroup {
            Some(p) => cgroup::validate(p)?,
            None => cgroup::validate(&cgroup::cgroup2_root()?)?,
        };
        preflight::require_kernel_support()?;
        let object = object::bpf_object().ok_or(Error::NoObject)?;
        let mut ebpf = EbpfLoader::new()
            .override_global("AYA_LOG_LEVEL", &options.bpf_log_level, false)
            .load(object)
            .map_err(|e| Error::Load(Box::new(e)))?;
        let logger = match EbpfLogger::init(&mut ebpf) {
            Ok(l) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "BPF log records unavailable");
                None
            }
        };

        // The default policy (netns key 0) applies to every namespace without its own.
        let compiled = outbound::Compiled {
            policy: outbound::attach_default(
                options.proxy_uid,
                options.proxy_gid,
                options.outbound_port,
            ),
            exclude: options
                .exclude_cidrs
                .iter()
                .map(|n| ipnet::IpNet::V4(n.trunc()))
                .collect(),
            include: Vec::new(),
            ports: Vec::new(),
            routes: Vec::new(),
        };
        outbound::write(&mut ebpf, 0, &compiled)?;

        let mut dp = Self {
            ebpf,
            logger,
            ebpf_enrolled: Vec::new(),
            sk_lookup: Vec::new(),
            sock_addr: Vec::new(),
            sock_ops: Vec::new(),
            getsockopt: Vec::new(),
            attachments: Vec::new(),
            options: AttachOptions {
                cgroup: app_cgroup.clone(),
                proxy_cgroup: Some(proxy_cgroup.clone()),
                ..options.clone()
            },
        };
        // Tracking first, capture last: a connect is only rewritten once its answer can be found.
        dp.attach_getsockopt(&proxy_cgroup)?;
        dp.attach_sock_ops(&proxy_cgroup)?;
        if !cgroup::contains(&proxy_cgroup, &app_cgroup) {
            dp.attach_sock_ops(&app_cgroup)?;
        }
        for (name, hook, _) in PEER_HOOKS {
            dp.attach_sock_addr(name, hook, &app_cgroup)?;
        }
        dp.attach_sock_addr(prog_names::CONNECT4, "connect4", &app_cgroup)?;
        dp.attach_sock_addr(prog_names::CONNECT6, "connect6", &app_cgroup)?;
        for spec in &options.inbound {
            dp.enroll(spec)?;
        }
        tracing::info!(
            cgroup = %app_cgroup.display(),
            proxy_cgroup = %proxy_cgroup.display(),
            proxy_uid = options.proxy_uid,
            proxy_gid = options.proxy_gid,
            outbound_port = options.outbound_port,
            "datapath attached"
        );
        Ok(dp)
    }

    pub(crate) fn record(&mut self, program: &'static str, attach_type: &str, cgroup: &Path) {
        let program_id = self
            .ebpf
            .program(program)
            .and_then(|p| p.info().ok())
            .map_or(0, |i| i.id());
        self.attachments.push(Attachment {
            program: program.into(),
            attach_type: attach_type.into(),
            target: cgroup.to_path_buf(),
            program_id,
        });
    }

    // Mode `Single` passes no flags: on kernels >= 5.7 aya attaches through bpf_link, which
    // the kernel always treats as multi-attach and which rejects BPF_F_ALLOW_MULTI (EINVAL).
    /// Attaches a cgroup sock_addr program (connect, sendmsg, recvmsg, getpeername).
    fn attach_sock_addr(
        &mut self,
        name: &'static str,
        hook: &'static str,
        cgroup: &Path,
    ) -> Result<()> {
        let id = attach_program!(self, CgroupSockAddr, name, hook, cgroup);
        self.sock_addr.push((name, id));
        Ok(())
    }

    fn attach_sock_ops(&mut self, cgroup: &Path) -> Result<()> {
        attach_program!(
            self,
            SockOps,
            prog_names::SOCK_OPS,
            "sock_ops",
            cgroup,
            sock_ops
        )
    }

    fn attach_getsockopt(&mut self, cgroup: &Path) -> Result<()> {
        attach_program!(
            self,
            CgroupSockopt,
            prog_names::GETSOCKOPT,
            "getsockopt",
            cgroup,
            getsockopt
        )
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
                    | aya::maps::Map::LruHashMap(d) => d,
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

    /// Detaches every program: capture (connect4) first, then tracking. Idempotent.
    pub fn detach(&mut self) -> Result<()> {
        let mut first_error = None;
        detach_programs!(
            self,
            SkLookup,
            prog_names::SK_LOOKUP,
            sk_lookup,
            first_error
        );
        // Capture first: connect4/6 were attached last, so detach in reverse order.
        for (name, id) in std::mem::take(&mut self.sock_addr).into_iter().rev() {
            if let Ok(prog) = program::<CgroupSockAddr>(&mut self.ebpf, name) {
                if let Err(e) = prog.detach(id) {
                    first_error.get_or_insert(e);
                }
            }
        }
        detach_programs!(self, SockOps, prog_names::SOCK_OPS, sock_ops, first_error);
        detach_programs!(
            self,
            CgroupSockopt,
            prog_names::GETSOCKOPT,
            getsockopt,
            first_error
        );
        self.attachments.clear();
        match first_error {
            None => Ok(()),
            Some(source) => Err(Error::Attach {
                action: "detaching",
                name: "program",
                cgroup: self.options.cgroup.clone(),
                source: Box::new(source),
            }),
        }
    }
}

impl Drop for Datapath {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            tracing::warn!(error = %e, "detach failed; dropping the object detaches the rest");
        }
    }
}

pub(crate) fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    let prog = ebpf.program_mut(name).ok_or(Error::Missing {
        kind: "program",
        name,
    })?;
    <&mut T>::try_from(prog).map_err(|_| Error::Missing {
        kind: "program",
        name,
    })
}

fn attach_error(name: &'static str, cgroup: &Path, source: aya::programs::ProgramError) -> Error {
    Error::Attach {
        action: "attaching",
        name,
        cgroup: cgroup.to_path_buf(),
        source: Box::new(source),
    }
}
