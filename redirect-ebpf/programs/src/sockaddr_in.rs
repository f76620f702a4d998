//! `struct sockaddr_in` and `struct sockaddr_in6` as the kernel lays them out: what the
//! getsockopt program writes as `SO_ORIGINAL_DST`'s answer and what `bpf_bind` reads.

/// `struct sockaddr_in`.
#[repr(C)]
pub(crate) struct SockaddrIn {
    pub(crate) family: u16,
    pub(crate) port: u16,
    pub(crate) addr: u32,
    pub(crate) zero: [u8; 8],
}

/// `struct sockaddr_in6`.
#[repr(C)]
pub(crate) struct SockaddrIn6 {
    pub(crate) family: u16,
    pub(crate) port: u16,
    pub(crate) flowinfo: u32,
    pub(crate) addr: [u32; 4],
    pub(crate) scope_id: u32,
}

const _: () = assert!(core::mem::size_of::<SockaddrIn>() == 16);
const _: () = assert!(core::mem::size_of::<SockaddrIn6>() == 28);
