//! `#[repr(C)]` types shared by the BPF programs and the user-space loader: map keys, values, config.
#![no_std]

/// Names of the maps in the BPF object, as user space looks them up.
pub mod map_names {
    /// `Array<Config>`, one entry: the capture policy.
    pub const CONFIG: &str = "CONFIG";
    /// `PerCpuArray<u64>`: one slot per [`crate::Counter`].
    pub const COUNTERS: &str = "COUNTERS";
    /// `LruHashMap<u64, OrigDst>`: socket cookie -> original destination, between connect4 and sock_ops.
    pub const PENDING: &str = "PENDING";
    /// `HashMap<ConnKey, Tracked>`: the redirected connection as the proxy sees it -> original destination.
    pub const TRACKED: &str = "TRACKED";
}

/// Names of the programs in the BPF object.
pub mod prog_names {
    /// `cgroup/connect4`: rewrites captured outbound connects.
    pub const CONNECT4: &str = "redirect_connect4";
    /// `sock_ops`: moves the original destination to the 4-tuple map and cleans it up on close.
    pub const SOCK_OPS: &str = "redirect_sock_ops";
    /// `cgroup/getsockopt`: answers `SO_ORIGINAL_DST`.
    pub const GETSOCKOPT: &str = "redirect_getsockopt";
}

/// Maximum entries of [`map_names::PENDING`].
pub const PENDING_MAX_ENTRIES: u32 = 65_536;
/// Maximum entries of [`map_names::TRACKED`].
pub const TRACKED_MAX_ENTRIES: u32 = 262_144;

/// `AF_INET` as the kernel numbers it.
pub const AF_INET: u16 = 2;
/// `AF_INET6` as the kernel numbers it.
pub const AF_INET6: u16 = 10;

/// The capture policy, written by user space into [`map_names::CONFIG`] before attaching.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Connections from this uid are never captured (the proxy's own traffic).
    pub proxy_uid: u32,
    /// Connections from this gid are never captured.
    pub proxy_gid: u32,
    /// Captured connections go to 127.0.0.1 on this port (host byte order).
    pub outbound_port: u16,
    /// Explicit padding; always zero.
    pub _pad: [u8; 6],
}

/// The destination an application asked for before the redirect.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrigDst {
    /// Address in network byte order; IPv4 uses `addr[0]` and leaves the rest zero.
    pub addr: [u32; 4],
    /// Port in network byte order.
    pub port: u16,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// Explicit padding; always zero.
    pub _pad: u32,
}

/// A redirected connection, keyed the way both of its ends can compute it.
///
/// `client` is the application's socket (local end of the connecting socket, remote end of the
/// proxy's accepted socket); `server` is the proxy's listener address (127.0.0.1:15001).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    /// Network namespace cookie: the same 4-tuple can exist in many namespaces.
    pub netns: u64,
    /// Client address, network byte order (IPv4 in word 0).
    pub client_addr: [u32; 4],
    /// Server address, network byte order (IPv4 in word 0).
    pub server_addr: [u32; 4],
    /// Client port, host byte order.
    pub client_port: u16,
    /// Server port, host byte order.
    pub server_port: u16,
    /// [`AF_INET`] or [`AF_INET6`].
    pub family: u16,
    /// Explicit padding; always zero.
    pub _pad: u16,
}

/// Value of [`map_names::TRACKED`]: the original destination and which sockets own the entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tracked {
    /// What `SO_ORIGINAL_DST` answers.
    pub dst: OrigDst,
    /// Socket cookie of the application's connecting socket.
    pub client_cookie: u64,
    /// Socket cookie of the proxy's accepted socket once it exists, else 0. When set, the entry
    /// lives until that socket closes (the application may close first).
    pub proxy_cookie: u64,
}

/// Slots of [`map_names::COUNTERS`]: one per decision.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// connect4 rewrote the destination to the proxy.
    Redirected = 0,
    /// connect4 left it alone: the caller's uid is the proxy uid.
    BypassUid = 1,
    /// connect4 left it alone: the caller's gid is the proxy gid.
    BypassGid = 2,
    /// connect4 left it alone: the destination is in 127.0.0.0/8.
    Loopback = 3,
    /// connect4 left it alone: not a TCP socket.
    NotTcp = 4,
    /// getsockopt(SO_ORIGINAL_DST) answered from the tracking map.
    OrigDstHit = 5,
    /// getsockopt(SO_ORIGINAL_DST) found no entry; the kernel's answer stands.
    OrigDstMiss = 6,
    /// A map update failed (map full); the connection went through untracked.
    TrackError = 7,
}

impl Counter {
    /// Every counter, in slot order.
    pub const ALL: [Counter; 8] = [
        Counter::Redirected,
        Counter::BypassUid,
        Counter::BypassGid,
        Counter::Loopback,
        Counter::NotTcp,
        Counter::OrigDstHit,
        Counter::OrigDstMiss,
        Counter::TrackError,
    ];
    /// Number of slots.
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// Stable snake_case name used in `redirect status` and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Redirected => "redirected",
            Counter::BypassUid => "bypass_uid",
            Counter::BypassGid => "bypass_gid",
            Counter::Loopback => "loopback",
            Counter::NotTcp => "not_tcp",
            Counter::OrigDstHit => "orig_dst_hit",
            Counter::OrigDstMiss => "orig_dst_miss",
            Counter::TrackError => "track_error",
        }
    }
}

const _: () = assert!(core::mem::size_of::<Config>() == 16);
const _: () = assert!(core::mem::size_of::<OrigDst>() == 24);
const _: () = assert!(core::mem::size_of::<ConnKey>() == 48);
const _: () = assert!(core::mem::size_of::<Tracked>() == 40);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all four types are #[repr(C)], contain only integers, and have explicit padding
    // fields, so every bit pattern is valid and no byte is uninitialised.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OrigDst {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ConnKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Tracked {}
}
