//! The few bpf(2) commands the loader needs that aya 0.14's public API does not cover for what
//! we hold (pins and raw descriptors, not aya-owned `Program`, `MapData` or `FdLink` values).
//! This is the loader's syscall edge; nothing else here (`bpfsys_replace.rs` has the commands of
//! an upgrade in place). What stays, and the aya API looked at:
//! - `BPF_MAP_CREATE` ([`array_map_create`], the layout and sizing records): `MapData::create`
//!   wants a hand-built `aya_obj::Map`, reads the kernel version to decide on the name and
//!   reports a `MapError`, not the `io::Error` the datapath's `Error::Pin` carries.
//! - `BPF_LINK_CREATE` ([`link_create`]): aya makes links only through `attach()` of a `Program`
//!   it owns (`SkLookup::from_pin` and the like add a `BPF_OBJ_GET_INFO_BY_FD`) and keeps the
//!   link in that program's link set; our callers hold a program's descriptor.
//! - `BPF_OBJ_PIN` ([`obj_pin`]): `FdLink::pin`, `MapData::pin` and a program's `pin` need an
//!   aya-owned object we do not have on this path: `FdLink` has no public constructor from an
//!   `OwnedFd` (`FdLink::new` is crate-private) and `MapData::from_fd` adds a
//!   `BPF_OBJ_GET_INFO_BY_FD`.
//! - `BPF_OBJ_GET` ([`obj_get`]): `PinnedLink::from_pin`, `MapData::from_pin`,
//!   `ProgramInfo::from_pin` and `MapInfo::from_pin` open a pin too, but none gives the
//!   descriptor back as one callers can pass on (`FdLink` has no `AsFd`, the `*Info` ones close
//!   it, `MapData::from_pin` adds a `BPF_OBJ_GET_INFO_BY_FD`). Where only a pinned link's program
//!   id is read (`load/program_stats.rs`), aya's `PinnedLink::from_pin` and `FdLink::info` are
//!   used instead.
//! - `BPF_OBJ_GET_INFO_BY_FD` of a netns link ([`link_netns_ino`]): aya's `LinkInfo` exposes the
//!   link id, program id and link type, not the netns inode (`bpf_link_info.netns.netns_ino`),
//!   nor a cgroup link's cgroup id ([`link_cgroup_id`]).
//! - `BPF_PROG_LOAD` of the two feature probes: `aya::sys::is_helper_supported` takes a
//!   `bpf_func_id` (it cannot name the unknown id the probe's self-check loads) and judges by the
//!   verifier log; `is_program_supported` checks a program type, not a context field
//!   (sk_lookup's `ingress_ifindex`).
use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    os::unix::ffi::OsStrExt as _,
    path::Path,
};

use aya_obj::generated::{
    bpf_attr, bpf_cmd, bpf_insn, bpf_link_info, bpf_link_type, bpf_map_info, bpf_map_type,
    bpf_prog_type,
};

/// `enum bpf_attach_type` values used by the datapath (from aya-obj's kernel bindings).
pub(crate) mod attach_type {
    use aya_obj::generated::bpf_attach_type as t;
    /// `BPF_CGROUP_SOCK_OPS`.
    pub(crate) const SOCK_OPS: u32 = t::BPF_CGROUP_SOCK_OPS as u32;
    /// `BPF_CGROUP_INET4_BIND`.
    pub(crate) const BIND4: u32 = t::BPF_CGROUP_INET4_BIND as u32;
    /// `BPF_CGROUP_INET6_BIND`.
    pub(crate) const BIND6: u32 = t::BPF_CGROUP_INET6_BIND as u32;
    /// `BPF_CGROUP_INET4_CONNECT`.
    pub(crate) const CONNECT4: u32 = t::BPF_CGROUP_INET4_CONNECT as u32;
    /// `BPF_CGROUP_INET6_CONNECT`.
    pub(crate) const CONNECT6: u32 = t::BPF_CGROUP_INET6_CONNECT as u32;
    /// `BPF_CGROUP_UDP4_SENDMSG`.
    pub(crate) const SENDMSG4: u32 = t::BPF_CGROUP_UDP4_SENDMSG as u32;
    /// `BPF_CGROUP_UDP6_SENDMSG`.
    pub(crate) const SENDMSG6: u32 = t::BPF_CGROUP_UDP6_SENDMSG as u32;
    /// `BPF_CGROUP_UDP4_RECVMSG`.
    pub(crate) const RECVMSG4: u32 = t::BPF_CGROUP_UDP4_RECVMSG as u32;
    /// `BPF_CGROUP_UDP6_RECVMSG`.
    pub(crate) const RECVMSG6: u32 = t::BPF_CGROUP_UDP6_RECVMSG as u32;
    /// `BPF_CGROUP_GETSOCKOPT`.
    pub(crate) const GETSOCKOPT: u32 = t::BPF_CGROUP_GETSOCKOPT as u32;
    /// `BPF_CGROUP_INET4_GETPEERNAME`.
    pub(crate) const GETPEERNAME4: u32 = t::BPF_CGROUP_INET4_GETPEERNAME as u32;
    /// `BPF_CGROUP_INET6_GETPEERNAME`.
    pub(crate) const GETPEERNAME6: u32 = t::BPF_CGROUP_INET6_GETPEERNAME as u32;
    /// `BPF_SK_LOOKUP`.
    pub(crate) const SK_LOOKUP: u32 = t::BPF_SK_LOOKUP as u32;
}

/// The kernel bindings' plain C types that are valid all-zero (integers, arrays of them and
/// unions of such structs: no pointers, references or enums inside).
pub(crate) trait PlainC: Copy {}
impl PlainC for bpf_attr {}
impl PlainC for bpf_link_info {}
impl PlainC for bpf_map_info {}

/// The all-zero value of `T`, as the kernel wants every unused byte of its structs.
pub(crate) fn zeroed<T: PlainC>() -> T {
    // SAFETY: `PlainC` is implemented only for bindgen's C structs and unions of integers,
    // for which every bit pattern, all-zero included, is a valid value.
    unsafe { std::mem::zeroed() }
}

/// A pointer as the kernel's `__aligned_u64` fields take it.
pub(crate) fn ptr_u64<T>(p: *const T) -> u64 {
    p as usize as u64
}

pub(crate) fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<libc::c_long> {
    // SAFETY: syscall edge: `attr` is a valid, zero-initialised bpf_attr of the size passed;
    // the pointers the caller put in it outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            std::ptr::from_mut(attr),
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

pub(crate) fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this new file descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A descriptor as the kernel's `__u32` fd fields take it.
pub(crate) fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    fd.as_raw_fd().unsigned_abs()
}

/// Creates a one-entry `BPF_MAP_TYPE_ARRAY` named `name` (at most 15 bytes) whose value has
/// `value_size` bytes.
pub(crate) fn array_map_create(name: &str, value_size: u32) -> io::Result<OwnedFd> {
    let bytes = name.as_bytes();
    if bytes.len() > 15 {
        return Err(io::Error::other("map name longer than 15 bytes"));
    }
    // `c_char` is i8 on x86_64 and u8 on aarch64: the byte is taken as it is on either.
    let mut map_name: [std::ffi::c_char; 16] = [0; 16];
    for (dst, src) in map_name.iter_mut().zip(bytes) {
        *dst = std::ffi::c_char::from_ne_bytes([*src]);
    }
    // Field writes only (safe on a union): the map-create member of the zeroed attr.
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_1.map_type = bpf_map_type::BPF_MAP_TYPE_ARRAY as u32;
    attr.__bindgen_anon_1.key_size = 4; // a u32 index
    attr.__bindgen_anon_1.value_size = value_size;
    attr.__bindgen_anon_1.max_entries = 1;
    attr.__bindgen_anon_1.map_name = map_name;
    owned(bpf(bpf_cmd::BPF_MAP_CREATE, &mut attr)?)
}

/// Creates a bpf_link of `prog` at `target` (a cgroup directory or netns file).
pub(crate) fn link_create(
    prog: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    attach: u32,
) -> io::Result<OwnedFd> {
    let mut attr: bpf_attr = zeroed();
    attr.link_create.__bindgen_anon_1.prog_fd = fd_u32(prog);
    attr.link_create.__bindgen_anon_2.target_fd = fd_u32(target);
    attr.link_create.attach_type = attach;
    owned(bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?)
}

fn path_attr(path: &Path, fd: u32) -> io::Result<(bpf_attr, CString)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path contains a NUL byte"))?;
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_4.pathname = ptr_u64(c.as_ptr());
    attr.__bindgen_anon_4.bpf_fd = fd;
    Ok((attr, c))
}

/// Pins `fd` (a program, map or link) at `path` in a bpffs.
pub(crate) fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let (mut attr, _keep) = path_attr(path, fd_u32(fd))?;
    bpf(bpf_cmd::BPF_OBJ_PIN, &mut attr).map(|_| ())
}

/// Opens the object pinned at `path`.
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let (mut attr, _keep) = path_attr(path, 0)?;
    owned(bpf(bpf_cmd::BPF_OBJ_GET, &mut attr)?)
}

/// Fills `info` (a `struct bpf_*_info`) for the object `fd` (`BPF_OBJ_GET_INFO_BY_FD`).
pub(crate) fn obj_info<T: PlainC>(fd: BorrowedFd<'_>) -> io::Result<T> {
    let mut info: T = zeroed();
    let mut attr: bpf_attr = zeroed();
    attr.info.bpf_fd = fd_u32(fd);
    attr.info.info_len = u32::try_from(std::mem::size_of::<T>()).unwrap_or(u32::MAX);
    attr.info.info = ptr_u64(std::ptr::from_mut(&mut info));
    bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

/// The network namespace inode a netns link (sk_lookup) is attached to: 0 once that namespace
/// is gone (the kernel detaches the link when the namespace dies, whoever still sees it).
pub(crate) fn link_netns_ino(link: BorrowedFd<'_>) -> io::Result<u32> {
    let info: bpf_link_info = obj_info(link)?;
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_NETNS as u32 {
        return Err(io::Error::other(format!(
            "link type {} is not a netns link",
            info.type_
        )));
    }
    // SAFETY: reading a union field: the kernel filled the `netns` member for a netns link
    // (checked above), and any bits are a valid pair of u32s.
    Ok(unsafe { info.__bindgen_anon_1.netns.netns_ino })
}

/// The cgroup id a cgroup link is attached to: 0 once that cgroup is gone (the kernel detaches
/// a cgroup's links when the cgroup is released).
pub(crate) fn link_cgroup_id(link: BorrowedFd<'_>) -> io::Result<u64> {
    let info: bpf_link_info = obj_info(link)?;
    if info.type_ != bpf_link_type::BPF_LINK_TYPE_CGROUP as u32 {
        return Err(io::Error::other(format!(
            "link type {} is not a cgroup link",
            info.type_
        )));
    }
    // SAFETY: reading a union field: the kernel filled the `cgroup` member for a cgroup link
    // (checked above), and any bits are a valid u64 and u32.
    Ok(unsafe { info.__bindgen_anon_1.cgroup.cgroup_id })
}

/// One `struct bpf_insn`: opcode, dst and src registers, offset, immediate.
pub(crate) fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    bpf_insn {
        code,
        _bitfield_align_1: [],
        _bitfield_1: bpf_insn::new_bitfield_1(dst, src),
        off,
        imm,
    }
}

/// Loads `insns` as a program of `prog_type` (with `expected_attach_type`).
pub(crate) fn prog_load(
    prog_type: bpf_prog_type,
    expected_attach_type: u32,
    insns: &[bpf_insn],
) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut attr: bpf_attr = zeroed();
    attr.__bindgen_anon_3.prog_type = prog_type as u32;
    attr.__bindgen_anon_3.insn_cnt = u32::try_from(insns.len()).unwrap_or(u32::MAX);
    attr.__bindgen_anon_3.insns = ptr_u64(insns.as_ptr());
    attr.__bindgen_anon_3.license = ptr_u64(license.as_ptr());
    attr.__bindgen_anon_3.expected_attach_type = expected_attach_type;
    owned(bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr)?)
}

/// Loads `insns` as [`prog_load`] does and unloads it again; whether the verifier accepted it.
fn loads(prog_type: bpf_prog_type, expected_attach_type: u32, insns: &[bpf_insn]) -> bool {
    prog_load(prog_type, expected_attach_type, insns).is_ok()
}

/// Whether sk_lookup programs may read `ingress_ifindex` (Linux 5.17).
pub(crate) fn sk_lookup_reads_ingress_ifindex() -> bool {
    const OFFSET_INGRESS_IFINDEX: i16 = 64; // offsetof(struct bpf_sk_lookup, ingress_ifindex)
    loads(
        bpf_prog_type::BPF_PROG_TYPE_SK_LOOKUP,
        attach_type::SK_LOOKUP,
        &[
            insn(0x61, 2, 1, OFFSET_INGRESS_IFINDEX, 0), // r2 = *(u32 *)(r1 + 64)
            insn(0xb7, 0, 0, 0, 1),                      // r0 = SK_PASS
            insn(0x95, 0, 0, 0, 0),                      // exit
        ],
    )
}

/// Whether a socket filter may call helper `id`: false for an id the kernel does not know.
pub(crate) fn helper_id_is_known(id: u32) -> bool {
    loads(
        bpf_prog_type::BPF_PROG_TYPE_SOCKET_FILTER,
        0,
        &[
            insn(0x85, 0, 0, 0, i32::try_from(id).unwrap_or(i32::MAX)), // call id
            insn(0xb7, 0, 0, 0, 0),                                     // r0 = 0
            insn(0x95, 0, 0, 0, 0),                                     // exit
        ],
    )
}
