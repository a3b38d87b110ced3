"""The pure parts of the isolation layers: symlink-by-symlink resolution, the ELF loader lookup, and the
read-only view the server computes for the system interpreter."""

from __future__ import annotations

import errno
import json
import subprocess
from pathlib import Path

import pytest

from rlvr.sandbox import _jail
from rlvr.sandbox.core import default_python


def test_resolve_records_every_link_on_the_way(tmp_path):
    (tmp_path / "real" / "lib").mkdir(parents=True)
    (tmp_path / "real" / "lib" / "ld.so").write_text("")
    (tmp_path / "lib64").symlink_to("real/lib")  # relative, like /lib64 -> usr/lib64
    (tmp_path / "real" / "lib" / "loader").symlink_to(tmp_path / "real" / "lib" / "ld.so")  # absolute
    links: dict[str, str] = {}
    resolved = _jail._resolve(str(tmp_path / "lib64" / "loader"), links)
    assert resolved == str(tmp_path / "real" / "lib" / "ld.so")
    assert links == {
        str(tmp_path / "lib64"): "real/lib",
        str(tmp_path / "real" / "lib" / "loader"): str(tmp_path / "real" / "lib" / "ld.so"),
    }


def test_resolve_stops_on_a_symlink_loop(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(OSError) as caught:
        _jail._resolve(str(tmp_path / "a"), {})
    assert caught.value.errno == errno.ELOOP


def test_elf_interpreter_of_the_system_python_and_of_a_script(tmp_path):
    assert _jail.elf_interpreter(str(Path(default_python()).resolve())) == "/lib64/ld-linux-x86-64.so.2"
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert _jail.elf_interpreter(str(script)) is None


def test_view_of_the_system_python_holds_the_interpreter_and_nothing_of_ours():
    # Computed by the system interpreter itself, as the server does (it depends on sys.executable).
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(_jail.__file__).parent)!r}); import _jail; "
        "print(json.dumps(_jail.read_only_view([])))"
    )
    out = subprocess.run(
        [default_python(), "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    )
    view = {(kind, path): target for kind, path, target in json.loads(out.stdout)}
    binds = {path for kind, path in view if kind == "bind"}
    assert {"/usr/bin/python3.11", "/usr/lib/python3.11", "/usr/lib/x86_64-linux-gnu"} <= binds
    assert "/etc/ld.so.cache" in binds
    assert view[("link", "/usr/bin/python3")] == "python3.11"
    # The loader's path as exec needs it: /lib64 -> usr/lib64, then a link into the bound library dir.
    assert view[("link", "/lib64")] == "usr/lib64"
    assert view[("link", "/usr/lib64/ld-linux-x86-64.so.2")] == "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert view[("link", "/lib")] == "usr/lib"
    assert not [
        p for _, p in view if p.startswith(("/work", "/root", "/home", "/usr/lib/python3/dist-packages"))
    ]
