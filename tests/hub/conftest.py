"""A real package index for the hub tests: pypiserver on loopback, uploads protected by an htpasswd file."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from passlib.apache import HtpasswdFile


@dataclass(frozen=True)
class PackageIndex:
    url: str  # upload URL (twine's --repository-url)
    simple_url: str  # PEP 503 index (pip's --index-url)
    username: str
    password: str
    packages: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def package_index(tmp_path_factory) -> PackageIndex:
    root = tmp_path_factory.mktemp("package-index")
    packages = root / "packages"
    packages.mkdir()
    username, password = "publisher", secrets.token_urlsafe(16)
    htpasswd = HtpasswdFile(str(root / "htpasswd"), new=True)
    htpasswd.set_password(username, password)
    htpasswd.save()
    port = _free_port()
    log = (root / "pypiserver.log").open("w")
    # -a update: listing and downloads are public, uploads need a login (pypiserver's default, made explicit).
    # --disable-fallback: unknown projects answer 404 instead of redirecting to pypi.org (tests stay offline).
    server = subprocess.Popen(
        [sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port), "-a", "update",
         "-P", str(root / "htpasswd"), "--disable-fallback", str(packages)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                pytest.fail(f"pypiserver exited with {server.returncode}: {(root / 'pypiserver.log').read_text()}")
            try:
                if httpx.get(url + "health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"pypiserver did not answer on {url} within 60 s")
            time.sleep(0.2)
        yield PackageIndex(url=url, simple_url=url + "simple/", username=username, password=password,
                           packages=packages)
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


@pytest.fixture
def pip_sees_only_the_index(monkeypatch) -> None:
    """This machine's pip configuration adds local wheel folders and mirrors: hide them, so an install can
    only succeed from the package index under test (and what the fresh venv borrows)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def rlvr():
    """Runs the `rlvr` command line as a user does: own process, wide output so messages do not wrap.
    ``env`` replaces the environment (default: this one); ``python`` picks the venv it runs in."""

    def run(*args: str, env: dict[str, str] | None = None, python: Path | None = None) -> subprocess.CompletedProcess:
        command = [str(python or sys.executable), "-c", "from rlvr.cli import main; main()", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=900,
                              env={**(os.environ if env is None else env), "COLUMNS": "1000"})

    return run


@pytest.fixture
def credentials(package_index, monkeypatch) -> dict[str, str]:
    """The index login in TWINE_* variables (how twine, and so `rlvr env publish`, reads it); a null keyring
    so that no test consults the keyring of the machine."""
    monkeypatch.setenv("TWINE_USERNAME", package_index.username)
    monkeypatch.setenv("TWINE_PASSWORD", package_index.password)
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.null.Keyring")
    return dict(os.environ)
