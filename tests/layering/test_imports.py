"""The package's layers import downwards only, and no two modules import each other (directly or in a cycle); the
environment packages under environments/ that are checked (CYCLE_FREE) form no cycle either.

Read from the source with `ast` (nothing is imported). A layer may import any lower layer and its own package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "rlvr"
# Lower numbers are lower layers: pure math and utilities first, the command line last.
LAYERS = {
    "io": 0, "restarts": 0, "config_files": 0,
    "models": 1, "credit": 1, "sandbox": 1, "weights": 1,
    "retrieval": 2, "serve": 2,
    "data": 3, "tools": 3, "rubrics": 3, "history": 3,
    "rollouts": 4, "hub": 4, "seeding": 4,
    "v1": 5,
    "evaluation": 6, "testing": 6, "token_prompts": 6, "trajectories": 6,
    "trainer": 7,
    "offline": 8, "analysis": 8,
    "demo": 9,
    "study": 10, "suite": 10, "pipeline": 10,
    "view": 11,
    "cli": 12,
}


def module_name(path: Path, package_dir: Path = SRC) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package_dir: Path) -> dict[str, Path]:
    return {module_name(p, package_dir): p for p in package_dir.rglob("*.py")}


def imports(path: Path, package: str = "rlvr", modules: dict[str, Path] | None = None) -> set[str]:
    """`package`'s modules imported anywhere in the file (top level, inside functions, under TYPE_CHECKING).
    `from pkg import sub` counts as importing the submodule alone when `sub` is one of `modules`: the package's
    __init__ runs first whichever way a submodule is imported, so that is no edge back to it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith(package)}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package) and node.level == 0:
            names = {f"{node.module}.{a.name}" for a in node.names}
            found |= names
            if modules is None or not names <= modules.keys():
                found.add(node.module)
    return found


def top(name: str) -> str:
    return name.split(".")[1] if name.count(".") else ""


MODULES = modules_of(SRC)
# environment packages checked for cycles (their own layers are not declared): package name -> its folder
CYCLE_FREE = {"vf_alfworld": ROOT / "environments" / "vf_alfworld" / "vf_alfworld",
              "vf_webshop": ROOT / "environments" / "vf_webshop" / "vf_webshop"}  # fmt: skip


def test_every_top_level_module_has_a_layer():
    missing = sorted({top(m) for m in MODULES if top(m)} - set(LAYERS))
    assert not missing, f"add {missing} to LAYERS in {__file__}"


def test_imports_point_down():
    upward = []
    for name, path in MODULES.items():
        here = top(name)
        for target in imports(path):
            there = top(target)
            if there and there != here and LAYERS.get(there, -1) >= LAYERS[here]:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports that point sideways or up:\n" + "\n".join(sorted(upward))


@pytest.mark.parametrize("package", ["rlvr", *CYCLE_FREE])
def test_no_import_cycles_between_modules(package):
    modules = MODULES if package == "rlvr" else modules_of(CYCLE_FREE[package])
    graph = {name: {t for t in imports(path, package, modules) if t in modules and t != name}
             for name, path in modules.items()}  # fmt: skip
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state and (cycle := visit(nxt, path + [node])):
                return cycle
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            cycle = visit(name, [])
            assert cycle is None, "import cycle: " + " -> ".join(cycle[cycle.index(cycle[-1]):])
