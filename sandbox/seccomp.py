"""The local sandbox's seccomp filter: the system calls Docker's default profile refuses a
process without capabilities, refused to every process of the run.

bubblewrap installs no filter of its own, and a job, although it has no capability, could
still create a user namespace (`unshare -U -r`) and be root inside it, with every
capability there: mounts, network devices, nested namespaces, and the kernel code behind them.
Docker's profile (moby `profiles/seccomp/default.json`) is an allow-list; this is the same
decision written as a deny-list over an allowing default, so that system calls newer than the
profile keep working, and each refusal says why it is here. Compiled with libseccomp (through
`pyseccomp`, a ctypes binding), which knows every architecture's syscall numbers, checks the
audit architecture and refuses the other ABIs of the machine (x86's i386 and x32, arm64's arm),
which would otherwise reach the kernel under numbers the rules do not name.

bubblewrap loads the program (`--seccomp FD`) just before it executes the supervisor, so the
supervisor and every job live under it. The supervisor needs nothing refused here: it forks
(clone without namespace flags), switches users, writes cgroup files and sets no_new_privs.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
from typing import Any

# Refused with EPERM, as Docker does, grouped by what they would give a job.
DENIED: dict[str, tuple[str, ...]] = {
    # new namespaces: a user namespace makes the job root in it (mounts, devices, nested pids)
    "namespaces": ("unshare", "setns"),
    # the mount table, old and new mount API
    "mounts": ("mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig",
               "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr"),
    # the kernel itself: modules, kexec, reboot, swap, accounting, quotas, the log, the clock
    "kernel": ("init_module", "finit_module", "delete_module", "create_module", "query_module",
               "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "swapon",
               "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "lookup_dcookie",
               "nfsservctl", "_sysctl", "sysfs", "ustat", "uselib", "vhangup", "sethostname",
               "setdomainname", "settimeofday", "stime", "clock_settime", "clock_settime64"),
    # large kernel attack surfaces reachable without privileges
    "attack surface": ("bpf", "perf_event_open", "userfaultfd", "fanotify_init", "keyctl",
                       "add_key", "request_key", "open_by_handle_at", "kcmp", "pidfd_getfd",
                       "process_madvise", "iopl", "ioperm", "vm86", "vm86old"),
    # NUMA memory policy: Docker gives it with CAP_SYS_NICE only
    "memory policy": ("get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node",
                      "move_pages", "migrate_pages"),
}
# Refused with ENOSYS, so that callers fall back as on an older kernel: glibc then uses clone
# (whose flags a filter can read; clone3 passes them in memory), liburing its plain I/O.
# io_uring is not refused by Docker's profile; it is the kernel's most exploited interface of
# late and no job needs it.
NOT_IMPLEMENTED = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")
# clone's namespace flags (Docker's mask 0x7E020000), each refused on its own.
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# personality flags that undo exploit mitigations (ASLR off, executable data, a mapped page 0,
# old address layouts); Docker allows only a handful of exact values. libseccomp cannot say
# "none of these values" with an allowing default, so each flag is refused: the 0xffffffff
# query has them all and is refused too.
PERSONALITY_FLAGS = {
    "ADDR_NO_RANDOMIZE": 0x0040000, "FDPIC_FUNCPTRS": 0x0080000, "MMAP_PAGE_ZERO": 0x0100000,
    "ADDR_COMPAT_LAYOUT": 0x0200000, "READ_IMPLIES_EXEC": 0x0400000,
    "ADDR_LIMIT_32BIT": 0x0800000, "SHORT_INODE": 0x1000000, "WHOLE_SECONDS": 0x2000000,
    "STICKY_TIMEOUTS": 0x4000000, "ADDR_LIMIT_3GB": 0x8000000,
}
# vsock sockets are not in any network namespace: the host's would stay reachable.
AF_VSOCK = 40
ARCHES = ("x86_64", "aarch64")


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its binding) is missing: the filter cannot be compiled here."""


def _library() -> Any:
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # the binding raises when libseccomp.so is absent
        raise SeccompUnavailable(
            f"the sandbox's seccomp filter needs libseccomp: install the `libseccomp2` "
            f"package ({exc})") from None
    return pyseccomp


def build(arch: str | None = None) -> Any:
    """The filter as a libseccomp context, for this machine's architecture or `arch`."""
    sc = _library()
    f = sc.SyscallFilter(sc.ALLOW)
    if arch is not None:
        target = {"x86_64": sc.Arch.X86_64, "aarch64": sc.Arch.AARCH64}[arch]
        if target != sc.system_arch():
            f.add_arch(target)
            f.remove_arch(sc.Arch.NATIVE)
    # Another ABI of the machine is no job's: end the process rather than answer it.
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    for names in DENIED.values():
        for name in names:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
    for name in NOT_IMPLEMENTED:
        f.add_rule(sc.ERRNO(errno.ENOSYS), name)
    for flag in CLONE_NAMESPACE_FLAGS.values():
        # s390 passes clone's flags second; the architectures we build for pass them first
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for flag in PERSONALITY_FLAGS.values():
        f.add_rule(sc.ERRNO(errno.EPERM), "personality", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, AF_VSOCK))
    return f


def _export(f: Any, method: str) -> bytes:
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "wb") as out:
            getattr(f, method)(out)
        with os.fdopen(read_end, "rb") as src:
            read_end = -1
            return src.read()
    finally:
        if read_end >= 0:
            os.close(read_end)


@functools.cache
def program(arch: str | None = None) -> bytes:
    """The compiled classic-BPF program (an array of `struct sock_filter`), as bubblewrap's
    `--seccomp` and `prctl(PR_SET_SECCOMP)` take it."""
    return _export(build(arch), "export_bpf")


def describe(arch: str | None = None) -> str:
    """The filter in libseccomp's readable pseudo-code (for tests and review)."""
    return _export(build(arch), "export_pfc").decode()


def program_fd() -> int:
    """A sealed memory file holding `program()`, at offset 0, for bubblewrap to read."""
    data = program()
    fd = os.memfd_create("a2rl-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd
