//! Writing a sysctl of the calling thread's network namespace where `/proc/sys` is read-only.
//!
//! Container runtimes bind-mount `/proc/sys` read-only into every non-privileged container,
//! which is where the node daemon runs in Kubernetes (the DaemonSet's capabilities, not
//! `privileged: true`): a plain open for writing fails with `EROFS` there. Only then, the
//! write goes through a detached clone of that mount instead: `open_tree(OPEN_TREE_CLONE)` of
//! `/proc/sys`, its read-only flag cleared with `mount_setattr` on the clone alone, the file
//! opened below it with `openat`. The clone is attached nowhere, so no other process (nor this
//! one's `/proc/sys`) sees it, and it goes when its descriptor closes. It needs what the
//! daemon's container has: `CAP_SYS_ADMIN` (as `mount` does) and Linux 5.12 or later
//! (`mount_setattr`); on an older kernel the error names both calls and what is needed.
//!
//! The file must be opened by a thread inside the namespace the value is for (a `net.*` sysctl
//! resolves against the opener's network namespace), which is what `NetnsHandle::run` gives.
//! The wrappers below are the only `unsafe` here, each at its syscall.
use std::{
    ffi::CString,
    fs::File,
    io::{self, Write as _},
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd},
    path::Path,
};

/// Where the kernel's sysctls are mounted.
const PROC_SYS: &str = "/proc/sys";

/// `struct mount_attr` as the kernel reads it: four u64 (`MOUNT_ATTR_SIZE_VER0`).
const _: () = assert!(
    std::mem::size_of::<libc::mount_attr>() == libc::MOUNT_ATTR_SIZE_VER0 as usize
        && std::mem::size_of::<libc::mount_attr>() == 4 * std::mem::size_of::<u64>()
);

/// Writes `value` to sysctl `name` (its path below `/proc/sys`, e.g.
/// `net/ipv4/tcp_fwmark_accept`) of the calling thread's namespaces; where `/proc/sys` is
/// mounted read-only (`EROFS`), through a writable detached clone of the mount (see the
/// module's documentation). Errors name the call and the path.
pub(crate) fn write(name: &str, value: &str) -> io::Result<()> {
    let path = Path::new(PROC_SYS).join(name);
    let shown = path.display();
    let (mut file, how) = match File::options().write(true).open(&path) {
        Ok(f) => (f, ""),
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => (
            open_writable_clone(name, &path)?,
            " (through a writable clone of the read-only /proc/sys mount)",
        ),
        Err(e) => return Err(context(e, format!("open({shown}, O_WRONLY)"))),
    };
    file.write_all(value.as_bytes())
        .map_err(|e| context(e, format!("write({value:?}) to {shown}{how}")))
}

/// Opens `/proc/sys/<name>` for writing below a detached, writable clone of `/proc/sys`.
fn open_writable_clone(name: &str, path: &Path) -> io::Result<File> {
    let why = format!(
        "writing {}: /proc/sys is mounted read-only here (as container runtimes mount it in a \
         non-privileged container)",
        path.display()
    );
    let needs = "needs CAP_SYS_ADMIN and Linux 5.12 or later (mount_setattr), or a writable \
                 /proc/sys";
    let tree = open_tree_clone(PROC_SYS).map_err(|e| {
        context(
            e,
            format!("{why}; open_tree({PROC_SYS}, OPEN_TREE_CLONE) for a writable clone {needs}"),
        )
    })?;
    clear_read_only(&tree).map_err(|e| {
        context(
            e,
            format!(
                "{why}; mount_setattr(clone of {PROC_SYS}, AT_EMPTY_PATH, clear MOUNT_ATTR_RDONLY) {needs}"
            ),
        )
    })?;
    open_write_at(&tree, name).map_err(|e| {
        context(
            e,
            format!("openat(writable clone of {PROC_SYS}, {name}, O_WRONLY)"),
        )
    })
}

/// `e` with `what` in front, its kind kept.
fn context(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn c_path(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in a path"))
}

/// A descriptor the kernel returned from a syscall (`ret`), or its error.
fn owned_fd(ret: libc::c_long) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(ret).map_err(|_| io::Error::other("descriptor out of range"))?;
    // SAFETY: syscall edge: `fd` is a new descriptor the kernel just returned to us, owned by
    // nothing else; it is closed when the `OwnedFd` drops.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)`: a detached copy of the
/// mount at `path`, attached nowhere, gone when the descriptor closes.
fn open_tree_clone(path: &str) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    // SAFETY: syscall edge: `path` is a NUL-terminated string alive for the call; the other
    // arguments are integers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC,
        )
    };
    owned_fd(ret)
}

/// `mount_setattr(tree, "", AT_EMPTY_PATH, {attr_clr: MOUNT_ATTR_RDONLY})`: the detached
/// mount `tree` (and only it) becomes writable.
fn clear_read_only(tree: &OwnedFd) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: 0,
        attr_clr: libc::MOUNT_ATTR_RDONLY,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: syscall edge: `tree` is an open descriptor, the empty path a static
    // NUL-terminated string, `attr` a valid `struct mount_attr` of the size passed, alive for
    // the call and only read by the kernel.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `openat(tree, name, O_WRONLY | O_CLOEXEC)`.
fn open_write_at(tree: &OwnedFd, name: &str) -> io::Result<File> {
    let name = c_path(name)?;
    // SAFETY: syscall edge: `tree` is an open descriptor and `name` a NUL-terminated string
    // alive for the call.
    let ret = unsafe {
        libc::openat(
            tree.as_raw_fd(),
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    owned_fd(libc::c_long::from(ret)).map(File::from)
}
