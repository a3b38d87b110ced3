"""Build, check, publish and install environment packages: one pip package per environment.

verifiers finds an environment by importing the module named after it (``vf.load_environment("vf-foo")``
imports ``vf_foo``, see ``verifiers/utils/env_utils.py``), so an environment is shared like any Python package:
built into a wheel, uploaded to a package index with twine, installed with pip. This module adds what
verifiers' own ``vf-init``/``vf-install`` lack:

- a scaffold whose wheel is correct when installed non-editable (the vf-init template ships
  ``pyproject.toml`` into the wheel, where it lands at the site-packages root, and its multi-file layout omits
  ``__init__.py``);
- a check that the built wheel installs into a *fresh* virtual environment and loads from there;
- an upload that refuses to replace a version already on the index and explains credential failures;
- an install that fails loudly when pip fails (``vf-install`` ignores pip's exit code).
"""

from __future__ import annotations

import ast
import email.parser
import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import venv
import zipfile
from collections.abc import Collection
from dataclasses import dataclass
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from string import Template
from urllib.parse import unquote, urlparse

import httpx
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

PREFIX = "vf-"
_NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
# pip variables that would let an outside index or wheel folder leak into a check meant to see only our files.
_PIP_SOURCE_VARS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX")


class HubError(Exception):
    """A hub operation failed; the message says what, where and how to fix it."""


@dataclass(frozen=True)
class EnvName:
    """The three spellings of one environment: distribution ``vf-foo-bar``, module and folder ``vf_foo_bar``."""

    dist: str
    module: str

    @classmethod
    def parse(cls, name: str) -> EnvName:
        """Accept ``foo-bar``, ``vf-foo-bar`` or ``vf_foo_bar``; the ``vf-`` prefix is added when missing."""
        if not _NAME_RE.match(name):
            raise HubError(
                f"invalid environment name {name!r}: use lowercase letters, digits and single '-' or '_' "
                "between them, starting with a letter (e.g. 'gsm8k-code')"
            )
        dist = name.replace("_", "-")
        if not dist.startswith(PREFIX):
            dist = PREFIX + dist
        return cls(dist=dist, module=dist.replace("-", "_"))


# ---------------------------------------------------------------------------------------------------------------
# Discovery: `rlvr env list`


@dataclass(frozen=True)
class InstalledEnv:
    name: str
    version: str
    module: str
    location: str
    editable: bool


def installed_environments() -> list[InstalledEnv]:
    """Distributions that depend on verifiers or rlvr and whose module, found the way vf.load_environment finds
    it (distribution name with '-' -> '_'), defines ``load_environment``. verifiers itself is not one."""
    found: dict[str, InstalledEnv] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        key = canonicalize_name(name or "")
        # Skip later copies: the first distribution on sys.path is the one whose module imports.
        if not name or key in found or not _requires_any(dist, {"verifiers", "rlvr"}):
            continue
        module = name.replace("-", "_")
        init = _module_source(module)
        if init is None or not _defines_load_environment(init):
            continue
        found[key] = InstalledEnv(
            name=name, version=dist.version, module=module, location=str(init.parent), editable=_is_editable(dist)
        )
    return sorted(found.values(), key=lambda env: env.name)


def _requires_any(dist: metadata.Distribution, names: set[str]) -> bool:
    for text in dist.requires or []:
        try:
            if canonicalize_name(Requirement(text).name) in names:
                return True
        except InvalidRequirement:  # another package's broken metadata must not break the listing
            continue
    return False


def _module_source(module: str) -> Path | None:
    # find_spec on a top-level name locates without importing. Importing every installed distribution
    # (torch, vllm, ...) just to look for an attribute would take minutes and run their import side effects.
    if not module.isidentifier():
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _defines_load_environment(source: Path) -> bool:
    """True when the module defines, imports or assigns the name ``load_environment`` at top level."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "load_environment":
            return True
        if isinstance(node, ast.ImportFrom | ast.Import):
            if any((alias.asname or alias.name) == "load_environment" for alias in node.names):
                return True
        if isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == "load_environment" for t in node.targets):
                return True
    return False


def _is_editable(dist: metadata.Distribution) -> bool:
    # PEP 610: an editable install records {"dir_info": {"editable": true}} in direct_url.json.
    direct_url = dist.read_text("direct_url.json")
    return bool(direct_url and json.loads(direct_url).get("dir_info", {}).get("editable"))


def _editable_source(dist: metadata.Distribution) -> Path:
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    return Path(unquote(urlparse(url).path))


# ---------------------------------------------------------------------------------------------------------------
# Scaffold: `rlvr env init`

TEMPLATE_FILES = {  # template file -> path in the new project ($module is substituted in paths too)
    "pyproject.toml": "pyproject.toml",
    "README.md": "README.md",
    "__init__.py": "$module/__init__.py",
    "test_env.py": "tests/test_$module.py",
}


def init_environment(name: str, parent: Path) -> Path:
    """Write a new environment project at ``parent/vf_<name>``; refuses to touch an existing folder."""
    env = EnvName.parse(name)
    target = parent / env.module
    if target.exists():
        raise HubError(f"{target} already exists: pick another name or remove the folder first")
    values = {"dist": env.dist, "module": env.module, "title": env.dist.removeprefix(PREFIX)}
    templates = resources.files("rlvr") / "templates" / "env"
    # Write into a sibling temporary folder and rename it into place: a failure leaves no half scaffold.
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{env.module}-", dir=parent))
    try:
        for source, dest in TEMPLATE_FILES.items():
            path = staging / Template(dest).substitute(values)
            path.parent.mkdir(parents=True, exist_ok=True)
            text = (templates / f"{source}.tmpl").read_text(encoding="utf-8")
            path.write_text(Template(text).substitute(values), encoding="utf-8")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


# ---------------------------------------------------------------------------------------------------------------
# Build and check: `rlvr env build`


def find_project(name_or_path: str, environments_dir: Path) -> Path:
    """An environment project folder: a path holding pyproject.toml, or ``environments_dir/vf_<name>``."""
    path = Path(name_or_path)
    if (path / "pyproject.toml").is_file():
        return path.resolve()
    candidate = environments_dir / EnvName.parse(name_or_path).module
    if (candidate / "pyproject.toml").is_file():
        return candidate.resolve()
    raise HubError(
        f"no environment project for {name_or_path!r}: neither {path} nor {candidate} holds a pyproject.toml "
        "(create one with `rlvr env init NAME`, or pass the project folder)"
    )


@dataclass(frozen=True)
class ProjectInfo:
    name: str
    version: str


def project_info(project: Path) -> ProjectInfo:
    pyproject = project / "pyproject.toml"
    try:
        table = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except tomllib.TOMLDecodeError as err:
        raise HubError(f"{pyproject} is not valid TOML: {err}") from err
    if "name" not in table or "version" not in table:
        raise HubError(f"{pyproject}: [project] needs a static `name` and `version` (dynamic ones are not supported)")
    return ProjectInfo(name=table["name"], version=table["version"])


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path


def build(project: Path, outdir: Path | None = None) -> Built:
    """Build sdist, then the wheel from that sdist (so a file missing from the sdist breaks the build here)."""
    outdir = outdir or project / "dist"
    _python_build(project, outdir)
    return dist_files(outdir, project_info(project))


def build_wheel(project: Path, outdir: Path) -> Path:
    """A wheel of ``project`` (no sdist), used for editable dependencies such as the rlvr core."""
    _python_build(project, outdir, "--wheel")
    info = project_info(project)
    (wheel,) = _dists_of(outdir, info, "*.whl", parse_wheel_filename)  # `build` just wrote exactly this one
    return wheel


def _python_build(project: Path, outdir: Path, *args: str) -> None:
    # No build isolation: the build backend (hatchling, in the `hub` extra) is already installed, so building
    # works offline and takes seconds instead of fetching the backend from the index on every build.
    _run(
        [sys.executable, "-m", "build", "--no-isolation", *args, "--outdir", str(outdir), str(project)],
        what=f"building {project}",
        fix="install the build tools with `pip install 'rlvr[hub]'` and fix the error above",
    )


def _dists_of(outdir: Path, info: ProjectInfo, pattern: str, parse) -> list[Path]:
    key, version = canonicalize_name(info.name), Version(info.version)
    return [p for p in outdir.glob(pattern) if tuple(parse(p.name)[:2]) == (key, version)]


def dist_files(outdir: Path, info: ProjectInfo) -> Built:
    """The wheel and sdist of the project's current version in ``outdir``."""
    wheels = _dists_of(outdir, info, "*.whl", parse_wheel_filename)
    sdists = _dists_of(outdir, info, "*.tar.gz", parse_sdist_filename)
    if len(wheels) != 1 or len(sdists) != 1:
        raise HubError(f"expected one wheel and one sdist of {info.name} {info.version} in {outdir}, found "
                       f"{sorted(p.name for p in wheels + sdists)}: run `rlvr env build {info.name}` first")
    return Built(wheel=wheels[0], sdist=sdists[0])


# Runs inside the interpreter of the venv under check: reports where the distribution and its module came from, whether
# a pyproject.toml sits at the site-packages root, and whether verifiers can load the environment.
_PROBE = """
import importlib.metadata as md, json, sys, sysconfig, traceback
from pathlib import Path
dist_name, module, out = sys.argv[1:4]
site = Path(sysconfig.get_paths()["purelib"]).resolve()
dist = md.distribution(dist_name)
report = {
    "site_packages": str(site),
    "dist_location": str(Path(dist.locate_file("")).resolve()),
    "version": dist.version,
    "root_pyproject_owners": [d.metadata["Name"] for d in md.distributions(path=[str(site)])
                              if any(str(f) == "pyproject.toml" for f in (d.files or []))],
    "root_pyproject": (site / "pyproject.toml").exists(),
}
try:
    import verifiers as vf
    env = vf.load_environment(dist_name)
    report["module_file"] = str(Path(sys.modules[module].__file__).resolve())
    report["env_class"] = type(env).__name__
except Exception:
    report["load_error"] = traceback.format_exc()
Path(out).write_text(json.dumps(report))
"""


@dataclass(frozen=True)
class CheckReport:
    name: str
    version: str
    env_class: str
    module_file: str


def check_wheel(wheel: Path, *, timeout: float = 600) -> CheckReport:
    """Install ``wheel`` into a fresh venv (offline), then load it from there with verifiers.

    The fresh venv borrows the already-installed third-party packages of this venv (verifiers, torch, ...)
    through a view of symlinks, so the check takes seconds instead of installing gigabytes. Editable
    installs (rlvr itself from a source checkout, the environments under development) are left out of that
    view: the wheel and any of those it depends on are installed into the fresh venv as wheels, so the check
    sees exactly what a user of the index would get. pip resolves the wheel's dependencies against that view
    and a local folder only: a dependency that is declared wrongly fails here.
    """
    name = parse_wheel_filename(wheel.name)[0]
    with tempfile.TemporaryDirectory(prefix="rlvr-env-check-") as tmp:
        tmp_path = Path(tmp)
        links = tmp_path / "wheels"
        links.mkdir()
        shutil.copy2(wheel, links)
        for source in _editable_dependency_sources(_wheel_requirements(wheel)):
            build_wheel(source, links)
        python = make_fresh_venv(tmp_path / "venv", hide={name})
        pip_install([str(links / wheel.name)], python=python, no_index=True, find_links=links, isolated=True,
                    fix="every dependency must be installed in this venv (the fresh venv borrows its packages) or "
                        "be an editable install here; install it, or fix `dependencies` in pyproject.toml")
        try:
            return verify_installed(python, _wheel_metadata(wheel)["Name"], timeout=timeout)
        except HubError as err:
            raise HubError(f"{wheel.name}, installed into a fresh venv: {err}") from None


def verify_installed(python: Path, dist_name: str, *, timeout: float = 600) -> CheckReport:
    """Check in the venv of ``python`` that ``dist_name`` is installed in its own site-packages, ships no
    root pyproject.toml, and that ``vf.load_environment(dist_name)`` works there."""
    module = dist_name.replace("-", "_")  # the module vf.load_environment imports for this name
    with tempfile.TemporaryDirectory(prefix="rlvr-env-probe-") as tmp:
        report_path = Path(tmp) / "report.json"
        _run([str(python), "-c", _PROBE, dist_name, module, str(report_path)],
             what=f"probing {dist_name} with {python}", fix="see the traceback above", timeout=timeout)
        report = json.loads(report_path.read_text())
    problems = _probe_problems(report, dist_name)
    if problems:
        raise HubError(f"{dist_name} failed the check in the venv of {python}:\n- " + "\n- ".join(problems))
    return CheckReport(name=dist_name, version=report["version"], env_class=report["env_class"],
                       module_file=report["module_file"])


def _probe_problems(report: dict, dist_name: str) -> list[str]:
    problems = []
    site = report["site_packages"]
    if report["root_pyproject"]:
        owners = ", ".join(report["root_pyproject_owners"]) or "an unknown distribution"
        problems.append(
            f"pyproject.toml lands at the site-packages root (shipped by {owners}); it collides with every other "
            "package doing the same. Build the wheel from a package folder: "
            "[tool.hatch.build.targets.wheel] packages = [\"<module>\"], and no `include` of pyproject.toml"
        )
    if report["dist_location"] != site:
        problems.append(f"{dist_name} metadata was found in {report['dist_location']}, not in the venv's own {site}")
    if "load_error" in report:
        problems.append(f"vf.load_environment({dist_name!r}) failed in that venv:\n{report['load_error']}")
    elif not report["module_file"].startswith(site + os.sep):
        problems.append(f"the module was imported from {report['module_file']}, not from the venv's own {site}: "
                        "the wheel does not contain it (check [tool.hatch.build.targets.wheel] packages)")
    return problems


def _wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as archive:
        name = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
        if name is None:
            raise HubError(f"{wheel} has no .dist-info/METADATA: it is not a valid wheel")
        return email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))


def _wheel_requirements(wheel: Path) -> list[Requirement]:
    requirements = [Requirement(r) for r in _wheel_metadata(wheel).get_all("Requires-Dist") or []]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": ""})]


def _editable_dependency_sources(requirements: list[Requirement]) -> list[Path]:
    """Source folders of the editable installs among the requirements, following their own requirements."""
    sources: dict[str, Path] = {}
    pending = list(requirements)
    while pending:
        key = canonicalize_name(pending.pop().name)
        if key in sources:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue  # pip reports it with the resolver's own message
        if _is_editable(dist):
            sources[key] = _editable_source(dist)
            pending.extend(Requirement(r) for r in dist.requires or [])
    return list(sources.values())


def make_fresh_venv(path: Path, hide: Collection[str] = ()) -> Path:
    """A venv without pip that sees this venv's non-editable packages (minus ``hide``) after its own.

    venvs do not chain, so a ``.pth`` file in the fresh site-packages appends a folder of symlinks to this
    venv's installed packages. The view holds no ``.pth`` files and no editable installs: what the fresh
    venv imports from this project must come from wheels installed into it. Returns its python.
    """
    venv.EnvBuilder(with_pip=False, symlinks=True).create(path)
    python = path / "bin" / "python"
    fresh_site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    view = path / "host-site-packages"
    view.mkdir()
    host_site = Path(sysconfig.get_paths()["purelib"])
    hidden = _hidden_entries(host_site, hide)
    for entry in host_site.iterdir():
        if entry.name not in hidden:
            (view / entry.name).symlink_to(entry)
    (fresh_site / "_rlvr_host_packages.pth").write_text(f"{view}\n", encoding="utf-8")
    return python


def _hidden_entries(site: Path, hide: Collection[str]) -> set[str]:
    hidden = {p.name for p in site.glob("*.pth")}
    hide_keys = {canonicalize_name(n) for n in hide}
    for dist in metadata.distributions(path=[str(site)]):
        if _is_editable(dist) or canonicalize_name(dist.metadata["Name"]) in hide_keys:
            # Every top-level entry the distribution installed: its dist-info, modules and import hooks.
            hidden.update(Path(str(f)).parts[0] for f in dist.files or [])
    return hidden


# ---------------------------------------------------------------------------------------------------------------
# Publish: `rlvr env publish`


class _Links(HTMLParser):
    """File names from a PEP 503 simple-index page (the text of its anchors)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self._in_anchor = False

    def handle_starttag(self, tag, attrs):
        self._in_anchor = tag == "a"

    def handle_endtag(self, tag):
        self._in_anchor = False

    def handle_data(self, data):
        if self._in_anchor and data.strip():
            self.names.append(data.strip())


def published_versions(index_url: str, name: str, auth: tuple[str, str] | None = None) -> set[str]:
    """Versions of ``name`` already on a PEP 503 simple index (empty if the project is unknown there)."""
    url = f"{index_url.rstrip('/')}/{canonicalize_name(name)}/"
    try:
        response = httpx.get(url, follow_redirects=True, timeout=30, auth=auth)
    except httpx.HTTPError as err:
        raise HubError(f"cannot reach the index at {url}: {err} (is the URL right and the server up?)") from err
    if response.status_code == 404:
        return set()
    if response.status_code != 200:
        raise HubError(f"{url} answered HTTP {response.status_code}: cannot tell which versions are published; "
                       "pass the simple index of the repository with --index-url")
    parser = _Links()
    parser.feed(response.text)
    versions = set()
    for filename in parser.names:
        if filename.endswith(".whl"):
            versions.add(str(parse_wheel_filename(filename)[1]))
        elif filename.endswith(".tar.gz"):
            versions.add(str(parse_sdist_filename(filename)[1]))
    return versions


def default_index_url(repository_url: str) -> str:
    """The simple index beside an upload URL: ``.../simple/`` for pypiserver-style hubs and PyPI's legacy URL."""
    if repository_url.rstrip("/").endswith("/legacy"):
        return repository_url.rstrip("/").removesuffix("/legacy") + "/simple/"
    return repository_url.rstrip("/") + "/simple/"


def publish(files: list[Path], repository_url: str, index_url: str | None = None, check_existing: bool = True) -> None:
    """Upload distribution files with twine; refuses any version already on the index.

    Credentials come from TWINE_USERNAME/TWINE_PASSWORD or the keyring, read by twine itself: they never
    appear on a command line (visible in ``ps``) nor in our output.
    """
    if check_existing:
        index_url = index_url or default_index_url(repository_url)
        for name, version in sorted({_dist_name_version(f) for f in files}):
            if version in published_versions(index_url, name, auth=_upload_login_for(index_url, repository_url)):
                raise HubError(f"{name} {version} is already on {repository_url}: published versions are "
                               "immutable. Bump `version` in pyproject.toml, rebuild, and publish again")
    # --verbose makes twine print the server's answer, which says why an upload was refused.
    command = [sys.executable, "-m", "twine", "--no-color", "upload", "--verbose", "--non-interactive",
               "--disable-progress-bar", "--repository-url", repository_url, *map(str, files)]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    if result.returncode != 0:
        raise HubError(_twine_failure(result.stdout + result.stderr, repository_url))


def _upload_login_for(index_url: str, repository_url: str) -> tuple[str, str] | None:
    """The TWINE_* login, for an index on the upload host only (a hub may protect its listing too; another
    host must never receive the password)."""
    user, password = os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD")
    same_host = urlparse(index_url).netloc == urlparse(repository_url).netloc
    return (user, password) if user and password and same_host else None


def _dist_name_version(path: Path) -> tuple[str, str]:
    if path.name.endswith(".whl"):
        name, version = parse_wheel_filename(path.name)[:2]
    elif path.name.endswith(".tar.gz"):
        name, version = parse_sdist_filename(path.name)
    else:
        raise HubError(f"{path} is neither a wheel nor an sdist (.tar.gz): build it with `rlvr env build`")
    return str(name), str(version)


def _twine_failure(output: str, repository_url: str) -> str:
    status = re.search(r"HTTPError: (\d{3}) ", output)
    code = int(status.group(1)) if status else None
    if code in (401, 403):
        return (f"{repository_url} rejected the credentials (HTTP {code}): set TWINE_USERNAME and TWINE_PASSWORD "
                "to an account allowed to upload there, or store the password with `keyring set "
                f"{repository_url} USERNAME`")
    # pypiserver answers 400 "already exists", PyPI 400 "File already exists", others 409 Conflict.
    if code == 409 or re.search(r"already\s+exists", output):
        return (f"{repository_url} refused the upload (HTTP {code}): this version is already there and published "
                "versions are immutable; bump `version` in pyproject.toml and rebuild")
    if re.search(r"Credential not found|(username|password).*required", output, re.IGNORECASE):
        return ("no credentials for the upload: set TWINE_USERNAME and TWINE_PASSWORD, or store them with "
                f"`keyring set {repository_url} USERNAME`")
    return f"twine upload to {repository_url} failed:\n{output.strip()}"


# ---------------------------------------------------------------------------------------------------------------
# Install: `rlvr env install`


def pip_install(requirements: list[str], *, python: Path | None = None, index_url: str | None = None,
                no_index: bool = False, find_links: Path | None = None, isolated: bool = False,
                fix: str = "check the name and version, and that the index serves them (pip's output is above)",
                ) -> None:
    """Run pip (for ``python``, default this interpreter) and raise HubError if it fails.

    ``isolated`` ignores pip's configuration files and PIP_* source variables, so only the given index or
    folder is used (the fresh-venv check must not pick up wheels from elsewhere).
    """
    command = [sys.executable, "-m", "pip"]
    if python is not None:
        command += ["--python", str(python)]
    command += ["install", "--disable-pip-version-check", *requirements]
    if index_url:
        command += ["--index-url", index_url]
    if no_index:
        command.append("--no-index")
    if find_links:
        command += ["--find-links", str(find_links)]
    env = dict(os.environ)
    if isolated:
        env["PIP_CONFIG_FILE"] = os.devnull
        for var in _PIP_SOURCE_VARS:
            env.pop(var, None)
    _run(command, what=f"pip install {' '.join(requirements)}", fix=fix, env=env)


def _run(command: list[str], *, what: str, fix: str, env: dict | None = None, timeout: float | None = None) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise HubError(f"{what} did not finish within {timeout:.0f} s") from err
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise HubError(f"{what} failed (exit code {result.returncode}):\n{tail}\n{fix}")
    return result.stdout
