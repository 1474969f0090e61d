"""A seccomp filter for sandboxed processes: no mounts, no namespaces, no tracing, even for root.

bubblewrap loads it (`--seccomp FD`) just before it executes the sandboxed program, so every
process inside runs under it. It is a plain classic-BPF program built here (no libseccomp):

- a syscall of another ABI than the machine's own (i386 `int 0x80`, x32 numbers) kills the process;
- the calls below fail with EPERM: mounting and unmounting (`mount`, `umount2`, the new mount
  API), entering or making namespaces (`setns`, `unshare`, `clone` with a CLONE_NEW* flag),
  `pivot_root`/`chroot`, tracing other processes (`ptrace`, `process_vm_*`, `kcmp`,
  `pidfd_getfd`), `bpf`, `perf_event_open`, `userfaultfd`, io_uring (its operations bypass
  seccomp), the kernel keyring, modules, kexec, clocks, swap, reboot, quotas, handles;
- `clone3` fails with ENOSYS (its flags sit in memory a filter cannot read), so the C library
  falls back to `clone`, whose flags are checked.

Everything else is allowed: the filter is about privilege, the bind mounts are about what can be
seen. Supported machines: x86_64 and aarch64; elsewhere `program()` returns None and the
sandbox says so.
"""
from __future__ import annotations

import errno
import platform
import struct

# Syscall numbers per machine: (x86_64, aarch64); None where the call does not exist there.
DENIED = {
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "setns": (308, 268), "unshare": (272, 97), "ptrace": (101, 117), "bpf": (321, 280),
    "perf_event_open": (298, 241), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264), "keyctl": (250, 219), "add_key": (248, 217),
    "request_key": (249, 218), "userfaultfd": (323, 282), "open_tree": (428, 428),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432),
    "fspick": (433, 433), "mount_setattr": (442, 442), "swapon": (167, 224), "swapoff": (168, 225),
    "reboot": (169, 142), "syslog": (103, 116), "acct": (163, 89), "settimeofday": (164, 170),
    "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "quotactl": (179, 60), "lookup_dcookie": (212, 18), "vhangup": (153, 58), "iopl": (172, None),
    "ioperm": (173, None), "uselib": (134, None), "_sysctl": (156, None), "nfsservctl": (180, 42),
    "pidfd_getfd": (438, 438), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "kcmp": (312, 272),
}
CLONE = (56, 220)
CLONE3 = (435, 435)
# clone() flags that make a namespace (all in the low 32 bits of the first argument).
CLONE_NEW_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
                   | 0x40000000)
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
# Offsets in struct seccomp_data: nr, arch, then instruction_pointer and args[6] (u64 each).
OFF_NR, OFF_ARCH, OFF_ARG0_LOW = 0, 4, 16


def machine() -> str | None:
    m = platform.machine().lower()
    return {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}.get(m)


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(arch: str | None = None) -> bytes | None:
    """The filter for `arch` ("x86_64" or "aarch64"; default this machine) as bytes for
    bwrap --seccomp, or None when this machine is not supported."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        return None
    col = 0 if arch == "x86_64" else 1
    eperm = RET_ERRNO | errno.EPERM
    out = [_ins(LD_W_ABS, OFF_ARCH),
           _ins(JEQ_K, AUDIT_ARCH[arch], jt=1),
           _ins(RET_K, RET_KILL_PROCESS),
           _ins(LD_W_ABS, OFF_NR)]
    if arch == "x86_64":             # x32 numbers reach the same calls by another path
        out += [_ins(JGE_K, X32_SYSCALL_BIT, jf=1), _ins(RET_K, RET_KILL_PROCESS)]
    for numbers in DENIED.values():
        if numbers[col] is not None:
            out += [_ins(JEQ_K, numbers[col], jf=1), _ins(RET_K, eperm)]
    out += [_ins(JEQ_K, CLONE3[col], jf=1), _ins(RET_K, RET_ERRNO | errno.ENOSYS)]
    out += [_ins(JEQ_K, CLONE[col], jf=3),            # not clone: allow
            _ins(LD_W_ABS, OFF_ARG0_LOW),
            _ins(JSET_K, CLONE_NEW_FLAGS, jf=1),
            _ins(RET_K, eperm),
            _ins(RET_K, RET_ALLOW)]
    return b"".join(out)
