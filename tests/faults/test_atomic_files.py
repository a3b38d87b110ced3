"""rlvr.io's atomic writes: the file appears whole, with the mode an ordinary write would give it (mkstemp's 0600
made the reports and records a study exports unreadable to anyone else sharing the machine)."""

from __future__ import annotations

import os
import subprocess
import sys

from rlvr.io import atomic_write_json, atomic_write_text


def test_a_file_written_atomically_has_the_mode_open_would_give_it(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    written = atomic_write_text(tmp_path / "report.md", "# report\n")
    assert written.read_text() == "# report\n"
    assert written.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_the_mode_follows_the_umask(tmp_path):
    """Under umask 077 the file stays private, as open() would leave it (a fresh process: the mode is read once)."""
    code = ("import os, sys; os.umask(0o077); from pathlib import Path; from rlvr.io import atomic_write_json; "
            "print(oct(atomic_write_json(Path(sys.argv[1]), {'a': 1}).stat().st_mode & 0o777))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "private.json")], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "0o600"
    replaced = atomic_write_json(tmp_path / "private.json", {"a": 2})  # this process's umask (022 under make test)
    mask = os.umask(0o022)
    os.umask(mask)
    assert replaced.stat().st_mode & 0o777 == 0o666 & ~mask
