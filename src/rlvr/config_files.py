"""The project's TOML files (training, study and pipeline configs) and `--env-args` JSON, read with errors that say
what to change: each caller passes its own error type, so a CLI reports them as it reports its other mistakes."""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ErrorType = Callable[[str], Exception]


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """" Did you mean 'x'?" for the closest option, "" when none is close."""
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def check_keys(table: dict, allowed: Iterable[str], where: str, error: ErrorType, hint: str = "") -> None:
    """An unknown key of `table` fails with the closest allowed one (or the allowed list, then `hint`)."""
    allowed = sorted(allowed)
    for key in table:
        if key not in allowed:
            raise error(f"unknown key {key!r} in {where}." + (did_you_mean(key, allowed) or
                        f" Allowed: {', '.join(allowed)}.{hint}"))


def read_toml(path: Path, what: str, examples: str, error: ErrorType) -> dict[str, Any]:
    """The TOML file at `path` (a `what`: "study config", ...), or `error` saying that it is missing (and where
    `examples` are) or where its syntax is wrong."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{what} {path} does not exist (examples: {examples})")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise error(f"{what} {path} is not valid TOML: {err}") from err


def parse_env_args(text: str, error: ErrorType) -> dict[str, Any]:
    """`--env-args` text: a JSON object of load_environment arguments, or `error` saying what is wrong with it."""
    try:
        args = json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"--env-args is not valid JSON ({err}): {text!r}. Example: --env-args '{{\"max_turns\": 3}}'") from err
    if not isinstance(args, dict):
        raise error(f"--env-args must be a JSON object, got {type(args).__name__}: {text!r}")
    return args
