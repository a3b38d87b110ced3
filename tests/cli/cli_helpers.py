"""Shared by the CLI tests: commands run in-process through typer's test runner (no interpreter start-up per
command). Rich wraps long lines at the runner's terminal width, even inside a path, and boxes errors, so
`Result.says` compares text with whitespace and box borders removed."""

from __future__ import annotations

import json
from pathlib import Path

import verifiers  # noqa: F401  (imported before any runner swaps stderr: its log handler keeps the real one)
from typer.testing import CliRunner

from rlvr.cli import app

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Small and fast: a 2-turn search episode, a few tokens per turn (tiny-random writes noise anyway).
TRIVIAQA_ARGS = {"protocol": "search", "num_train_examples": 8, "num_eval_examples": 3, "max_turns": 2}


class Result:
    def __init__(self, raw):
        self.exit_code = raw.exit_code
        self.output = raw.output
        self.exception = raw.exception

    def says(self, text: str) -> bool:
        return squash(text) in squash(self.output)

    def __repr__(self) -> str:
        return f"exit {self.exit_code}, exception {self.exception!r}\n{self.output[-4000:]}"


def squash(text: str) -> str:
    return "".join(text.replace("│", " ").split())


def invoke(typer_app, *args: str | Path) -> Result:
    return Result(CliRunner().invoke(typer_app, [str(a) for a in args]))


def rlvr(*args: str | Path) -> Result:
    """Run `rlvr ARGS` in this process."""
    return invoke(app, *args)


def ok(*args: str | Path) -> Result:
    result = rlvr(*args)
    assert result.exit_code == 0, result
    return result


def assert_png(path: Path) -> None:
    from PIL import Image

    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        assert image.size[0] > 100 and image.size[1] > 100, image.size


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

