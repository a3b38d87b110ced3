"""The suite's time budget (docs/testing.md, "The budget"): each area's share of `make test`'s time.

An area is a test directory: tests/<area> or environments/<package>. conftest.py reports each area's measured share
against the one the docs give it at the end of every run."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUDGET_DOC = REPO_ROOT / "docs" / "testing.md"
BUDGET_ROW = re.compile(r"^\|\s*`([\w./-]+)`\s*\|\s*(\d+(?:\.\d+)?)\s*%", re.MULTILINE)


def area_of(nodeid: str) -> str:
    """tests/<area> or environments/<package>: the first two parts of the test's path."""
    return "/".join(nodeid.split("::", 1)[0].split("/")[:2])


def budget_shares(doc: Path = BUDGET_DOC) -> dict[str, float]:
    """Area -> its share of the suite's time in percent: the rows `| `area` | N% |` of docs/testing.md."""
    text = doc.read_text() if doc.is_file() else ""
    return {area: float(share) for area, share in BUDGET_ROW.findall(text)}


def areas_with_tests(root: Path = REPO_ROOT) -> set[str]:
    """The areas that hold test modules."""
    modules = [*root.glob("tests/*/**/test_*.py"), *root.glob("environments/*/tests/**/test_*.py")]
    return {area_of(str(module.relative_to(root))) for module in modules}
