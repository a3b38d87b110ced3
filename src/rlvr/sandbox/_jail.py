"""Isolation layers of one sandbox call: namespaces, a private filesystem view, seccomp, leftovers sweep.

Standard library only: imported by the sandbox server (`_server.py`), which runs on the sandbox's own
interpreter with `-I -S`. Everything here runs as root in a process forked for one call.

The private filesystem (what bubblewrap's `--tmpfs / --ro-bind ... --proc /proc` and nsjail build, written here
with ctypes so it can run inside the pre-forked server, where exec'ing a helper per call would cost an
interpreter start):

    /                    a small tmpfs, read-only once built
    /usr/bin/python3...  read-only binds of what the interpreter maps or loads: the executable, its standard
    /usr/lib/...         library, the directories of its shared libraries, its ELF loader, /etc/ld.so.cache,
                         /etc/localtime, plus the packages the call allows; host symlinks on the way
                         (/lib64 -> usr/lib64, ...) are recreated
    /sandbox /tmp        binds of one size-capped tmpfs owned by the program's uid: the only writable
    /dev/shm             directories, sharing one disk quota
    /dev/{null,...}      read-only binds of the host's harmless character devices
    /proc                a procfs of the call's own PID namespace, hidepid=2 (other uids' processes hidden)

Built in a fresh mount namespace (made private, so nothing propagates to the host) and entered with
pivot_root; the host's tree is then detached. When the last process of the call exits the namespace and
both tmpfs go with it: nothing written survives the call.
"""

import ctypes
import errno
import importlib.machinery
import importlib.util
import os
import shutil
import struct
import sys
import sysconfig

libc = ctypes.CDLL(None, use_errno=True)

# <linux/sched.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CALL_NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET
# <linux/mount.h>
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MNT_DETACH = 0x2
# pivot_root has no glibc wrapper.
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}

NEW_ROOT = "/tmp"  # where the new root is assembled, hiding the host's /tmp in this mount namespace only
SCRATCH = "/.scratch"  # the call's writable tmpfs, mounted here while its directories are bound
WRITABLE = ("/sandbox", "/tmp", "/dev/shm")  # the program's working directory first
SCRATCH_INODES = 8192  # files and directories the program may create in all its writable directories
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}

# Syscalls the program never needs and an attacker wants: other processes' memory, new namespaces (user
# namespaces are the usual path to kernel bugs), mounts, kernel keyrings (they outlive the call, per uid),
# bpf, io_uring, perf, userfaultfd, modules, and memfd_create (RAM outside both the address-space limit and
# the disk quota). Denied with EPERM; everything else is allowed.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "process_madvise",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "mount_setattr",
    "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "memfd_create",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "syslog",
)  # fmt: skip
NAMESPACE_FLAGS = (
    CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET
)  # fmt: skip


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target: str, fstype=None, flags: int = 0, data=None) -> None:
    enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
    _check(libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {source} on {target}")


def umount(target: str) -> None:
    _check(libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def unshare_call_namespaces() -> bool:
    """New mount, UTS, IPC, PID and network namespaces for this process; False when the kernel refuses
    (not root, or namespaces disabled), in which case nothing changed."""
    return libc.unshare(CALL_NAMESPACES) == 0


# ---------------------------------------------------------------------------------------------------------
# The read-only view, computed once by the server from the host (what the interpreter really uses).


def elf_interpreter(path: str) -> str | None:
    """PT_INTERP of a 64-bit little-endian ELF executable (the dynamic loader a child `exec` would need)."""
    with open(path, "rb") as f:
        header = f.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        (phoff,) = struct.unpack_from("<Q", header, 32)  # Elf64_Ehdr.e_phoff
        phentsize, phnum = struct.unpack_from("<HH", header, 54)  # e_phentsize, e_phnum
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, _, p_offset, _, _, p_filesz = struct.unpack("<IIQQQQ", f.read(40))  # Elf64_Phdr
            if p_type == 3:  # PT_INTERP
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    return None


def site_dirs() -> list[str]:
    import site  # noqa: PLC0415 - only its path helpers; the server never runs site.main()

    return [os.path.realpath(d) for d in site.getsitepackages()]


def _mapped_dirs(exclude: list[str]) -> set[str]:
    """Directories of the files this process has mapped (shared libraries, locale data), outside `exclude`."""
    dirs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if path.startswith("/") and os.path.exists(path):
                real = os.path.realpath(path)
                if not any(real == e or real.startswith(e + "/") for e in exclude):
                    dirs.add(os.path.dirname(real))
    return dirs


def _resolve(path: str, links: dict[str, str]) -> str:
    """`path` with its symlinks resolved one component at a time, recording each link met in `links`
    (so the sandbox can recreate /lib64 -> usr/lib64 and the like)."""
    current = "/"
    parts = [p for p in path.split("/") if p]
    for _ in range(40):  # ELOOP bound, as the kernel's
        for i, part in enumerate(parts):
            candidate = os.path.join(current, part)
            if os.path.islink(candidate):
                target = os.readlink(candidate)
                links[candidate] = target
                resolved = os.path.normpath(os.path.join(current, target))
                parts = [p for p in resolved.split("/") if p] + parts[i + 1 :]
                current = "/"
                break
            current = candidate
        else:
            return current
    raise OSError(errno.ELOOP, f"too many symlinks resolving {path}")


def read_only_view(extra: list[str]) -> list[tuple[str, str, str]]:
    """What the sandbox binds read-only, as sorted (kind, path, target) entries: ("link", path, target)
    recreates a host symlink, ("bind", path, "") binds a host file or directory at the same path.

    The paths: this interpreter (sys.executable and its ELF loader), its standard library, the directories
    of everything it has mapped so far except the site-packages (shared libraries and locale data, the
    server has preloaded the modules programs use most), the loader cache and local time, and `extra`."""
    stdlib = {os.path.realpath(sysconfig.get_path(k)) for k in ("stdlib", "platstdlib")}
    executable = os.path.realpath(sys.executable)
    wanted = {sys.executable, *stdlib, *extra}
    wanted |= _mapped_dirs(exclude=[executable, *stdlib, *site_dirs()])
    loader = elf_interpreter(executable)
    wanted |= {p for p in (loader, "/etc/ld.so.cache", "/etc/localtime") if p and os.path.exists(p)}
    links: dict[str, str] = {}
    binds = {_resolve(p, links) for p in wanted}
    # A path under a bound directory comes with it.
    binds = {b for b in binds if not any(b.startswith(o + "/") for o in binds)}
    inside = [p for p in links if any(p.startswith(b + "/") for b in binds)]
    entries = [("bind", b, "") for b in binds] + [("link", p, t) for p, t in links.items() if p not in inside]
    return sorted(entries, key=lambda e: e[1])


def package_paths(names: list[str]) -> list[str]:
    """Host paths of allowed top-level packages or modules, found in the interpreter's site directories."""
    paths = []
    for name in names:
        found = [
            os.path.join(d, entry)
            for d in site_dirs()
            if os.path.isdir(d)
            for entry in os.listdir(d)
            if entry == name or (entry.startswith(name + ".") and not entry.endswith(".pth"))
        ]
        if not found:
            raise ValueError(
                f"package {name!r} is not installed for {sys.executable} (looked in {site_dirs()})"
            )
        paths += found
    return paths


# ---------------------------------------------------------------------------------------------------------
# Building the private root, in a fresh mount namespace, as pid 1 of the call's PID namespace.


def _mount_point(path: str, like: str) -> None:
    """An empty directory, or an empty file when `like` (the host path to bind) is not a directory."""
    if os.path.isdir(like):
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()


def _bind_read_only(host: str, inside: str, device: bool = False) -> None:
    _mount_point(inside, host)
    mount(host, inside, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (MS_NOEXEC if device else MS_NODEV)
    mount(None, inside, None, flags)


def enter_private_root(view: list[tuple[str, str, str]], uid: int | None, disk_mb: int) -> None:
    """Assemble the call's root (see the module docstring) and pivot into it; cwd becomes /sandbox."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    root = NEW_ROOT
    mount("rlvr-sandbox-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,nr_inodes=1024,mode=755")
    for kind, path, target in view:
        if kind == "link":
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(target, root + path)
        else:
            _bind_read_only(path, root + path)
    for name in DEVICES:
        _bind_read_only(f"/dev/{name}", f"{root}/dev/{name}", device=True)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{root}/dev/{name}")

    scratch = root + SCRATCH
    os.mkdir(scratch)
    options = f"size={disk_mb}m,nr_inodes={SCRATCH_INODES},mode=755"
    mount("rlvr-sandbox-scratch", scratch, "tmpfs", MS_NOSUID | MS_NODEV, options)
    for path in WRITABLE:
        private = scratch + "/" + os.path.basename(path)
        os.mkdir(private, 0o700)
        if uid is not None:
            os.chown(private, uid, uid)
        os.makedirs(root + path, exist_ok=True)
        mount(private, root + path, None, MS_BIND)
    umount(scratch)  # the binds keep the tmpfs (and its one size cap) alive
    os.rmdir(scratch)
    os.mkdir(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")

    os.chdir(root)
    arch = os.uname().machine
    if arch not in SYS_PIVOT_ROOT:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {arch}")
    _check(libc.syscall(SYS_PIVOT_ROOT[arch], b".", b"."), "pivot_root")
    umount(".")  # the host's tree, stacked on top of ours by pivot_root(".", ".")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _check(libc.sethostname(b"sandbox", 7), "sethostname")
    os.chdir(WRITABLE[0])


def cap_sysv_shm(quota_mb: int) -> None:
    """Bound the call's SysV shared memory (RAM that outlives its processes until the IPC namespace goes)
    by the same quota as its tmpfs. These sysctls belong to the IPC namespace of the writer: ours only."""
    quota = quota_mb * 1024 * 1024
    limits = {"shmmax": quota, "shmall": quota // os.sysconf("SC_PAGE_SIZE"), "shmmni": 64}
    for name, value in limits.items():
        with open(f"/proc/sys/kernel/{name}", "w") as f:
            f.write(str(value))


# ---------------------------------------------------------------------------------------------------------
# seccomp, through libseccomp's own Python binding (Debian: python3-seccomp).


def syscall_filter():
    """The filter programs run under, or None when libseccomp's binding is not installed."""
    # The binding lives in the interpreter's site-packages, which the server (-S) does not put on sys.path.
    spec = importlib.machinery.PathFinder.find_spec("seccomp", site_dirs())
    if spec is None:
        return None
    seccomp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seccomp)
    deny = seccomp.ERRNO(errno.EPERM)
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        f.add_rule(deny, name)
    for flag in NAMESPACE_FLAGS:  # clone() that would create a namespace; plain fork/thread clones pass
        f.add_rule(deny, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone().
    f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    return f


# ---------------------------------------------------------------------------------------------------------
# Fallback without namespaces: the program saw the host filesystem; remove what its private uid left.

TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


def live_processes_of(uid: int) -> list[int]:
    """Pids whose real uid is `uid` and that are not zombies (dead, waiting to be reaped)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while we looked
        if fields["State"].split()[0] not in ("Z", "X") and int(fields["Uid"].split()[0]) == uid:
            pids.append(int(entry))
    return pids


IPC_RMID = 0


def sweep_uid(uid: int) -> None:
    """Delete the files, directories and SysV IPC objects `uid` owns in the shared temporary places.

    Runs after every process of `uid` is dead, so nothing changes underneath; links are removed, never
    followed (a planted symlink to /etc cannot make root delete /etc)."""
    for top in TEMP_DIRS:
        if not os.path.isdir(top):
            continue
        with os.scandir(top) as entries:
            for entry in entries:
                try:
                    if entry.stat(follow_symlinks=False).st_uid != uid:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
                except FileNotFoundError:
                    pass
    # Shared memory segments, semaphore sets and message queues outlive their creator (the IPC namespace
    # removes them when there is one). /proc/sysvipc tables: the id is the second column.
    remove = {
        "shm": lambda ipc_id: libc.shmctl(ipc_id, IPC_RMID, None),
        "sem": lambda ipc_id: libc.semctl(ipc_id, 0, IPC_RMID),
        "msg": lambda ipc_id: libc.msgctl(ipc_id, IPC_RMID, None),
    }
    for kind, rmid in remove.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                header = table.readline().split()
                rows = [dict(zip(header, line.split(), strict=False)) for line in table]
        except FileNotFoundError:
            continue
        for row in rows:
            if int(row["uid"]) == uid:
                rmid(int(row[header[1]]))
