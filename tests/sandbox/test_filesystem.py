"""The private filesystem: nothing written survives a call, nothing of the host but the interpreter is
visible, and the only writable places are the call's own. Also what an attacker tries next: links out of
the tmpfs, other processes' /proc, inherited descriptors, signals and unix sockets to the host.

The fallback (no mount namespace) cannot hide the host's files; its tests check what it does promise:
the private uid's leftovers in the shared temporary places are removed, without following planted links.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlvr.sandbox import SandboxConfig, run_python

REPO_ROOT = Path(__file__).resolve().parents[2]
BOTH_MODES = pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "fallback"])
TEMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
MB = 1024 * 1024


def run(code: str, **config):
    return run_python(textwrap.dedent(code), SandboxConfig(**config))


def shmem_bytes() -> int:
    """RAM held by every tmpfs and shared-memory object on the machine (/proc/meminfo Shmem)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem line in /proc/meminfo")


def files_owned_by(uid: int) -> list[str]:
    found = []
    for top in TEMP_DIRS:
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                try:
                    if os.lstat(path).st_uid == uid:
                        found.append(path)
                except FileNotFoundError:
                    pass
    return found


def sysv_objects_of(uid: int) -> list[str]:
    rows = []
    for kind in ("shm", "sem", "msg"):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        header = lines[0].split()
        rows += [
            f"{kind} {line}"
            for line in lines[1:]
            if dict(zip(header, line.split(), strict=False)).get("uid") == str(uid)
        ]
    return rows


FILL = """
    import ctypes, json, os
    written = {}
    for directory in ("/tmp", "/dev/shm", "."):
        written[directory] = 0
        for i in range(FILES):
            try:
                with open(os.path.join(directory, f"junk{i}.bin"), "wb") as f:
                    f.write(b"x" * (4 * 1024 * 1024))
                written[directory] += 4
            except OSError:
                break
    # A SysV shared-memory segment outlives its creator unless its IPC namespace goes.
    libc = ctypes.CDLL(None)
    libc.shmget.restype = ctypes.c_int
    shmid = libc.shmget(0, 8 * 1024 * 1024, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    print(json.dumps({"written_mb": written, "shmid": shmid}))
"""


@BOTH_MODES
def test_filling_tmp_and_shm_leaves_nothing_behind(namespaces):
    before = shmem_bytes()
    # 4 MB files: with namespaces, more than the 200 MB quota; without, a few (the host's own disks).
    files = 60 if namespaces else 3
    result = run(
        FILL.replace("FILES", str(files)), disk_mb=200, file_size_mb=8, namespaces=namespaces, timeout=20
    )
    assert result.ok, result.stderr
    report = json.loads(result.stdout)
    assert report["shmid"] >= 0
    uid = result.isolation.uid
    if namespaces:
        # One quota for all three directories: the writes stopped at 200 MB in total.
        assert 180 <= sum(report["written_mb"].values()) <= 200
    else:
        assert report["written_mb"]["/tmp"] > 0 and report["written_mb"]["/dev/shm"] > 0
    assert files_owned_by(uid) == []
    assert sysv_objects_of(uid) == []
    # The RAM behind /dev/shm and the tmpfs comes back (other sessions share the machine: small slack,
    # and the kernel frees an unmounted tmpfs a moment after the last process exits).
    deadline = time.monotonic() + 10
    while shmem_bytes() > before + 32 * MB and time.monotonic() < deadline:
        time.sleep(0.2)
    assert shmem_bytes() <= before + 32 * MB


def test_disk_quota_is_shared_by_all_writable_directories():
    result = run(
        """
        import os
        for directory in ("/sandbox", "/tmp", "/dev/shm"):
            try:
                with open(os.path.join(directory, "chunk"), "wb") as f:
                    f.write(b"x" * (3 * 1024 * 1024))
                print(directory, "ok")
            except OSError as e:
                print(directory, e.strerror)
        st = os.statvfs("/tmp")
        print(st.f_blocks * st.f_frsize // (1024 * 1024))
        # SysV shared memory, RAM held until the call's IPC namespace goes: capped by the same quota.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for size_mb in (6, 6, 12):
            print(libc.shmget(0, size_mb * 1024 * 1024, 0o1600) >= 0, os.strerror(ctypes.get_errno()))
        """,
        disk_mb=8,
    )
    assert result.stdout.splitlines() == [
        "/sandbox ok",
        "/tmp ok",
        "/dev/shm No space left on device",
        "8",
        "True Success",
        "False No space left on device",  # 12 MB in all: over the 8 MB total
        "False Invalid argument",  # one segment over the 8 MB maximum
    ]
    assert result.isolation.disk_quota_mb == 8


def test_project_data_and_home_are_neither_readable_nor_listable(shared_data):
    secrets = [
        REPO_ROOT / "README.md",
        REPO_ROOT / ".venv" / "bin" / "python",
        shared_data / "README.md",
        Path(sys.executable),
        Path("/root/.bashrc"),
        Path("/etc/passwd"),
    ]
    directories = [REPO_ROOT, REPO_ROOT.parent, shared_data, Path("/root"), Path("/home"), Path("/work")]
    assert all(p.exists() for p in directories[:3])
    result = run(f"""
        import os
        for path in {[str(p) for p in secrets + directories]!r}:
            for attempt in (lambda: open(path, "rb").read(1), lambda: os.listdir(path)):
                try:
                    attempt()
                    print("VISIBLE", path)
                except OSError:
                    pass
        # Every name reachable from the root, following no links (/proc aside: it is the call's own).
        names = set()
        for dirpath, dirnames, filenames in os.walk("/"):
            if dirpath == "/":
                dirnames.remove("proc")
            names.update(os.path.join(dirpath, n) for n in dirnames + filenames)
        print(sorted(os.listdir("/")))
        print(any("/work" in n or "/root" in n or "/home" in n or ".venv" in n or "rlvr" in n for n in names))
        print(len(names))
    """)
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith("VISIBLE")]
    assert lines[-3] == str(sorted(["dev", "etc", "lib", "lib64", "proc", "sandbox", "tmp", "usr"]))
    assert lines[-2] == "False"
    assert result.isolation.filesystem == "private"


def test_writable_places_are_exactly_the_private_directories():
    result = run("""
        import os
        writable = []
        for dirpath, dirnames, filenames in os.walk("/"):
            if dirpath == "/":
                dirnames.remove("proc")  # per-process knobs of the call's own processes
            probe = os.path.join(dirpath, ".probe")
            try:
                open(probe, "x").close()
                os.unlink(probe)
                writable.append(dirpath)
            except OSError:
                pass
        print(sorted(writable))
        for attempt in (lambda: os.chmod("/usr/lib", 0o777), lambda: os.mkdir("/etc/x"), lambda: os.rename("/tmp", "/x")):
            try:
                attempt()
                print("CHANGED")
            except OSError:
                pass
    """)
    assert result.ok, result.stderr
    assert result.stdout == "['/dev/shm', '/sandbox', '/tmp']\n"


def test_links_cannot_lead_out_of_the_tmpfs(shared_data):
    target = shared_data / "README.md"
    result = run(f"""
        import os
        os.symlink({str(target)!r}, "/tmp/data")
        os.symlink("/proc/1/root", "/tmp/init-root")
        for path in ("/tmp/data", "/tmp/init-root/etc/passwd", "/proc/self/root/../../work", "/sandbox/../../root"):
            try:
                print(path, len(open(path, "rb").read()))
            except OSError as e:
                print(path, type(e).__name__)
        for source in ("/usr/lib/python3.11/os.py", "/etc/ld.so.cache"):
            try:
                os.link(source, "/tmp/hard")
                print("LINKED", source)
            except OSError as e:
                print(source, e.strerror)
    """)
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == [
        "/tmp/data FileNotFoundError",
        "/tmp/init-root/etc/passwd FileNotFoundError",  # pid 1 (root) is hidden by hidepid
        "/proc/self/root/../../work FileNotFoundError",
        "/sandbox/../../root FileNotFoundError",
        "/usr/lib/python3.11/os.py Invalid cross-device link",
        "/etc/ld.so.cache Invalid cross-device link",
    ]


def test_proc_shows_only_the_calls_own_processes():
    result = run(f"""
        import os
        child = os.fork()
        if child == 0:
            import time; time.sleep(5); os._exit(0)
        visible = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
        print(visible == sorted([os.getpid(), child]), os.path.exists("/proc/{os.getpid()}"), os.path.exists("/proc/1"))
        os.kill(child, 9)
    """)
    assert result.ok, result.stderr
    assert result.stdout == "True False False\n"


@BOTH_MODES
def test_only_stdio_descriptors_are_inherited(namespaces):
    leak = open(__file__, "rb")  # an open file of ours: it must not reach the program
    try:
        result = run(
            """
            import os
            fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
            print(fds[:-1])  # the last one is the directory being listed
            print([os.readlink(f"/proc/self/fd/{fd}") for fd in fds[:3]])
            """,
            namespaces=namespaces,
        )
    finally:
        leak.close()
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "[0, 1, 2]"
    assert lines[1].startswith("['/dev/null', '/memfd:rlvr-sandbox-stdout")


@BOTH_MODES
def test_signals_cannot_reach_host_processes(namespaces):
    victim = subprocess.Popen(["sleep", "60"])
    try:
        result = run(
            f"""
            import os, signal
            for attempt in (lambda: os.kill({victim.pid}, signal.SIGKILL), lambda: os.kill({os.getpid()}, signal.SIGTERM),
                            lambda: os.killpg(1, signal.SIGKILL), lambda: os.kill(-1, signal.SIGKILL)):
                try:
                    attempt()
                except OSError as e:
                    print(type(e).__name__)
            """,
            namespaces=namespaces,
        )
        assert victim.poll() is None  # still running
    finally:
        victim.kill()
        victim.wait()
    # kill(-1) kills the program itself (its own uid) in both modes; nothing of ours was touched.
    assert result.signal == signal.SIGKILL or result.ok


@BOTH_MODES
def test_unix_sockets_of_the_host_are_out_of_reach(tmp_path, namespaces):
    path = tmp_path / "host.sock"
    tmp_path.chmod(0o777)
    abstract = f"\0rlvr-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX) as on_disk, socket.socket(socket.AF_UNIX) as in_abstract:
        on_disk.bind(str(path))
        path.chmod(0o777)
        in_abstract.bind(abstract)
        for server in (on_disk, in_abstract):
            server.listen()
            server.setblocking(False)
        result = run(
            f"""
            import _socket  # under socket.socket, which the fallback replaces
            for address in ({str(path)!r}, {abstract!r}):
                s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
                try:
                    s.connect(address)
                    print("CONNECTED", repr(address))
                except OSError as e:
                    print(type(e).__name__)
            """,
            namespaces=namespaces,
        )
        accepted = 0
        for server in (on_disk, in_abstract):
            try:
                server.accept()[0].close()
                accepted += 1
            except BlockingIOError:
                pass
    assert result.ok, result.stderr
    if namespaces:
        # The file does not exist in the private root; abstract names belong to the network namespace.
        assert result.stdout.splitlines() == ["FileNotFoundError", "ConnectionRefusedError"]
        assert accepted == 0
    else:
        # The fallback's limit, documented: the uid may not enter our directory, but the abstract
        # namespace is shared with the host.
        assert result.stdout.splitlines()[0] == "PermissionError"


def test_fallback_sweep_removes_links_without_following_them(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    tmp_path.chmod(0o755)
    result = run(
        f"""
        import os
        os.symlink({str(precious)!r}, "/tmp/rlvr-test-link-{os.getpid()}")
        os.mkdir("/dev/shm/rlvr-test-dir-{os.getpid()}")
        os.symlink({str(tmp_path)!r}, "/dev/shm/rlvr-test-dir-{os.getpid()}/inner-link")
        open("/var/tmp/rlvr-test-file-{os.getpid()}", "w").write("junk")
        """,
        namespaces=False,
    )
    assert result.ok, result.stderr
    assert result.isolation.filesystem == "host-swept" and result.isolation.ipc == "swept"
    assert result.isolation.disk_quota_mb is None
    assert files_owned_by(result.isolation.uid) == []
    assert precious.read_text() == "keep me"


def test_an_unprivileged_caller_gets_the_fallback_and_says_so(in_forked_child):
    # Not root: the kernel refuses the namespaces (no user namespace is tried) and there is no uid to
    # switch to, so the program runs as the caller, with what still works reported as such.
    def as_nobody() -> dict:
        os.setgid(65534)
        os.setuid(65534)
        result = run_python("import os; print(os.getuid())")
        return {"stdout": result.stdout, "isolation": vars(result.isolation)}

    payload = in_forked_child(as_nobody)
    assert payload.get("stdout") == "65534\n", payload
    assert payload["isolation"] == {
        "network": "blocked-sockets",
        "containment": "process-group",
        "uid": None,
        "filesystem": "host",
        "ipc": "host",
        "disk_quota_mb": None,
        "seccomp": "filter",
    }
