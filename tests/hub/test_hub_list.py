"""`rlvr env list` finds environments the way vf.load_environment does, without importing anything."""

from __future__ import annotations

import textwrap
from pathlib import Path

from rlvr import hub


def _install(site: Path, name: str, version: str, requires: list[str], init: str) -> None:
    """A minimal installed distribution: its dist-info metadata and its top-level module."""
    module = name.replace("-", "_")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    (info / "METADATA").write_text("\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n")
    (site / module).mkdir()
    (site / module / "__init__.py").write_text(textwrap.dedent(init))


def test_list_keeps_distributions_whose_module_defines_load_environment(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _install(site, "vf-reexported", "0.3.0", ["rlvr", "verifiers==0.1.9.post3"],
             "from .env import load_environment\n")
    # Importing it would fail: the listing must not import modules.
    _install(site, "vf-defined", "1.2.0", ["verifiers"], "import does_not_exist\ndef load_environment(**kw): ...\n")
    _install(site, "vf-noloader", "0.1.0", ["verifiers"], "def make_env(): ...\n")
    _install(site, "helper-lib", "2.0.0", ["numpy"], "def load_environment(): ...\n")  # not a verifiers env
    _install(site, "vf-broken", "0.1.0", ["verifiers"], "def load_environment(:\n")  # syntax error
    monkeypatch.syspath_prepend(str(site))

    found = {env.name: env for env in hub.installed_environments() if env.location.startswith(str(site))}
    assert sorted(found) == ["vf-defined", "vf-reexported"]
    assert found["vf-reexported"] == hub.InstalledEnv(
        name="vf-reexported", version="0.3.0", module="vf_reexported", location=str(site / "vf_reexported"),
        editable=False)
    assert found["vf-defined"].version == "1.2.0"
    assert "verifiers" not in {env.name for env in hub.installed_environments()}
