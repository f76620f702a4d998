//! Another vendor's cgroup `connect4` program, for the coexistence test only (feature
//! `test-support`, never in a product build): a socket load balancer as Cilium's socket-LB is
//! one, rewriting connects to one IPv4 service address (a ClusterIP) to one backend, in the
//! same hook as ours. Ten instructions loaded with `BPF_PROG_LOAD` and linked at a cgroup with
//! `BPF_LINK_CREATE` (the descriptor returned is the link: closing it detaches the program).
//! aya loads programs from an ELF object only; this one is written for the test, not built.
use std::{io, net::SocketAddrV4, os::fd::AsFd as _, path::Path};

use aya_obj::generated::bpf_prog_type;

use super::bpfsys::{attach_type, insn, link_create, prog_load};

/// `offsetof(struct bpf_sock_addr, user_ip4)`.
const USER_IP4: i16 = 4;
/// `offsetof(struct bpf_sock_addr, user_port)`.
const USER_PORT: i16 = 24;

/// A 32-bit word of the context as the program reads it: the bytes in memory order.
fn word(bytes: [u8; 4]) -> i32 {
    i32::from_ne_bytes(bytes)
}

/// Attaches, at the cgroup directory `cgroup` (after whatever is attached there already), a
/// `connect4` program that rewrites a connect to `service` into one to `backend`; every other
/// connect passes unchanged. Returns the link.
pub fn service_rewrite(
    cgroup: &Path,
    service: SocketAddrV4,
    backend: SocketAddrV4,
) -> io::Result<std::os::fd::OwnedFd> {
    let port = |a: SocketAddrV4| {
        let [hi, lo] = a.port().to_be_bytes();
        word([hi, lo, 0, 0])
    };
    let insns = [
        insn(0x61, 2, 1, USER_IP4, 0),                    // r2 = ctx->user_ip4
        insn(0x56, 2, 0, 6, word(service.ip().octets())), // if w2 != service ip goto out
        insn(0x61, 2, 1, USER_PORT, 0),                   // r2 = ctx->user_port
        insn(0x56, 2, 0, 4, port(service)),               // if w2 != service port goto out
        insn(0xb4, 3, 0, 0, word(backend.ip().octets())), // w3 = backend ip
        insn(0x63, 1, 3, USER_IP4, 0),                    // ctx->user_ip4 = w3
        insn(0xb4, 3, 0, 0, port(backend)),               // w3 = backend port
        insn(0x63, 1, 3, USER_PORT, 0),                   // ctx->user_port = w3
        insn(0xb7, 0, 0, 0, 1),                           // out: r0 = 1 (allow)
        insn(0x95, 0, 0, 0, 0),                           // exit
    ];
    let prog = prog_load(
        bpf_prog_type::BPF_PROG_TYPE_CGROUP_SOCK_ADDR,
        attach_type::CONNECT4,
        &insns,
    )?;
    let dir = std::fs::File::open(cgroup)?;
    link_create(prog.as_fd(), dir.as_fd(), attach_type::CONNECT4)
}
