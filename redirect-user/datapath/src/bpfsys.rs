//! The few bpf(2) commands aya does not expose for every program type: `BPF_MAP_CREATE` (of the
//! layout record), `BPF_PROG_LOAD` (of the two feature probes aya has no probe for),
//! `BPF_LINK_CREATE`, `BPF_OBJ_PIN`, `BPF_OBJ_GET` and `BPF_OBJ_GET_INFO_BY_FD` (of a netns
//! link). This is the loader's syscall edge; nothing else here (`bpfsys_replace.rs` has the
//! commands of an upgrade in place).
use std::{
    ffi::CString,
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd},
    os::unix::ffi::OsStrExt as _,
    path::Path,
};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
pub(crate) const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;

/// `enum bpf_attach_type` values used by the datapath.
pub mod attach_type {
    /// `BPF_CGROUP_SOCK_OPS`.
    pub const SOCK_OPS: u32 = 3;
    /// `BPF_CGROUP_INET4_BIND`.
    pub const BIND4: u32 = 8;
    /// `BPF_CGROUP_INET6_BIND`.
    pub const BIND6: u32 = 9;
    /// `BPF_CGROUP_INET4_CONNECT`.
    pub const CONNECT4: u32 = 10;
    /// `BPF_CGROUP_INET6_CONNECT`.
    pub const CONNECT6: u32 = 11;
    /// `BPF_CGROUP_UDP4_SENDMSG`.
    pub const SENDMSG4: u32 = 14;
    /// `BPF_CGROUP_UDP6_SENDMSG`.
    pub const SENDMSG6: u32 = 15;
    /// `BPF_CGROUP_UDP4_RECVMSG`.
    pub const RECVMSG4: u32 = 19;
    /// `BPF_CGROUP_UDP6_RECVMSG`.
    pub const RECVMSG6: u32 = 20;
    /// `BPF_CGROUP_GETSOCKOPT`.
    pub const GETSOCKOPT: u32 = 21;
    /// `BPF_CGROUP_INET4_GETPEERNAME`.
    pub const GETPEERNAME4: u32 = 29;
    /// `BPF_CGROUP_INET6_GETPEERNAME`.
    pub const GETPEERNAME6: u32 = 30;
    /// `BPF_SK_LOOKUP`.
    pub const SK_LOOKUP: u32 = 36;
}

/// `union bpf_attr`, as large as any command here uses (the kernel wants the rest zeroed).
#[repr(C, align(8))]
pub(crate) struct Attr(pub(crate) [u32; 16]);

pub(crate) fn bpf(cmd: libc::c_long, attr: &Attr) -> io::Result<libc::c_long> {
    // SAFETY: syscall edge: `attr` is a valid, fully initialised bpf_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_ref(attr),
            std::mem::size_of::<Attr>(),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Stores `v` in the `__aligned_u64` field at `word` of a bpf_attr (two 32-bit words, in the
/// host's byte order, so big-endian hosts get the halves right too).
pub(crate) fn set_u64(words: &mut [u32], word: usize, v: u64) {
    let b = v.to_ne_bytes();
    words[word] = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    words[word + 1] = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
}

pub(crate) fn owned(fd: libc::c_long) -> io::Result<OwnedFd> {
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this new file descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Creates a one-entry `BPF_MAP_TYPE_ARRAY` named `name` (at most 15 bytes) whose value has
/// `value_size` bytes.
pub fn array_map_create(name: &str, value_size: u32) -> io::Result<OwnedFd> {
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    let mut attr = Attr([0; 16]);
    attr.0[0] = BPF_MAP_TYPE_ARRAY;
    attr.0[1] = 4; // key: u32 index
    attr.0[2] = value_size;
    attr.0[3] = 1; // max_entries
                   // map_name: char[16] at byte offset 28 (words 7..11), NUL-terminated.
    let bytes = name.as_bytes();
    if bytes.len() > 15 {
        return Err(io::Error::other("map name longer than 15 bytes"));
    }
    let mut buf = [0u8; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    for (i, chunk) in buf.chunks_exact(4).enumerate() {
        attr.0[7 + i] = u32::from_ne_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    owned(bpf(BPF_MAP_CREATE, &attr)?)
}

/// Creates a bpf_link of `prog` at `target` (a cgroup directory or netns file).
pub fn link_create(
    prog: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    attach: u32,
) -> io::Result<OwnedFd> {
    let mut attr = Attr([0; 16]);
    attr.0[0] = prog.as_raw_fd() as u32;
    attr.0[1] = target.as_raw_fd() as u32;
    attr.0[2] = attach;
    owned(bpf(BPF_LINK_CREATE, &attr)?)
}

fn path_attr(path: &Path, fd: u32) -> io::Result<(Attr, CString)> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("path contains a NUL byte"))?;
    let mut attr = Attr([0; 16]);
    set_u64(&mut attr.0, 0, c.as_ptr() as u64);
    attr.0[2] = fd;
    Ok((attr, c))
}

/// Pins `fd` (a program, map or link) at `path` in a bpffs.
pub fn obj_pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let (attr, _keep) = path_attr(path, fd.as_raw_fd() as u32)?;
    bpf(BPF_OBJ_PIN, &attr).map(|_| ())
}

/// Opens the object pinned at `path`.
pub fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let (attr, _keep) = path_attr(path, 0)?;
    owned(bpf(BPF_OBJ_GET, &attr)?)
}

/// The network namespace inode a netns link (sk_lookup) is attached to: 0 once that namespace
/// is gone (the kernel detaches the link when the namespace dies, whoever still sees it).
pub fn link_netns_ino(link: BorrowedFd<'_>) -> io::Result<u32> {
    /// `struct bpf_link_info`: type, id, prog_id, then (8-aligned) `netns { netns_ino, attach_type }`.
    #[repr(C, align(8))]
    struct LinkInfo([u32; 32]);
    const BPF_LINK_TYPE_NETNS: u32 = 5;
    let mut info = LinkInfo([0; 32]);
    let mut attr = Attr([0; 16]);
    attr.0[0] = link.as_raw_fd() as u32;
    attr.0[1] = std::mem::size_of::<LinkInfo>() as u32;
    set_u64(&mut attr.0, 2, std::ptr::from_mut(&mut info) as u64);
    bpf(BPF_OBJ_GET_INFO_BY_FD, &attr)?;
    if info.0[0] != BPF_LINK_TYPE_NETNS {
        return Err(io::Error::other(format!(
            "link type {} is not a netns link",
            info.0[0]
        )));
    }
    Ok(info.0[4])
}

/// One `struct bpf_insn`: opcode, dst and src registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let o = off.to_ne_bytes();
    let i = imm.to_ne_bytes();
    // The register byte is `dst_reg:4, src_reg:4` in the host's bit-field order.
    let regs = if cfg!(target_endian = "little") {
        (src << 4) | (dst & 0xf)
    } else {
        (dst << 4) | (src & 0xf)
    };
    [code, regs, o[0], o[1], i[0], i[1], i[2], i[3]]
}

/// Loads `insns` as a program of `prog_type` (with `expected_attach_type`) and unloads it
/// again; whether the verifier accepted it.
fn loads(prog_type: u32, expected_attach_type: u32, insns: &[[u8; 8]]) -> bool {
    #[repr(C, align(8))]
    struct LoadAttr([u32; 32]);
    let code: Vec<u8> = insns.iter().flatten().copied().collect();
    let license = c"GPL";
    let mut attr = LoadAttr([0; 32]);
    attr.0[0] = prog_type;
    attr.0[1] = u32::try_from(insns.len()).unwrap_or(u32::MAX);
    set_u64(&mut attr.0, 2, code.as_ptr() as u64);
    set_u64(&mut attr.0, 4, license.as_ptr() as u64);
    attr.0[17] = expected_attach_type; // byte offset 68
                                       // SAFETY: syscall edge: `attr` is a zeroed bpf_attr large enough for BPF_PROG_LOAD, whose
                                       // pointers (instructions, license) outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<LoadAttr>(),
        )
    };
    if rc < 0 {
        return false;
    }
    drop(owned(rc));
    true
}

/// Whether sk_lookup programs may read `ingress_ifindex` (Linux 5.17).
pub fn sk_lookup_reads_ingress_ifindex() -> bool {
    const BPF_PROG_TYPE_SK_LOOKUP: u32 = 30;
    const OFFSET_INGRESS_IFINDEX: i16 = 64; // offsetof(struct bpf_sk_lookup, ingress_ifindex)
    loads(
        BPF_PROG_TYPE_SK_LOOKUP,
        attach_type::SK_LOOKUP,
        &[
            insn(0x61, 2, 1, OFFSET_INGRESS_IFINDEX, 0), // r2 = *(u32 *)(r1 + 64)
            insn(0xb7, 0, 0, 0, 1),                      // r0 = SK_PASS
            insn(0x95, 0, 0, 0, 0),                      // exit
        ],
    )
}

/// Whether a socket filter may call helper `id`: false for an id the kernel does not know.
pub fn helper_id_is_known(id: u32) -> bool {
    const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;
    loads(
        BPF_PROG_TYPE_SOCKET_FILTER,
        0,
        &[
            insn(0x85, 0, 0, 0, i32::try_from(id).unwrap_or(i32::MAX)), // call id
            insn(0xb7, 0, 0, 0, 0),                                     // r0 = 0
            insn(0x95, 0, 0, 0, 0),                                     // exit
        ],
    )
}
