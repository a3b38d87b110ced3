"""Fingerprints of a checkpoint's weights, to check that a rebuilt starting model is the committed one.

`fingerprint(DIR)`: a sha256 over every tensor of DIR's *.safetensors files in a canonical order (sorted by name; per
tensor its name, dtype, shape and the sha256 of its raw bytes), so two checkpoints hash alike exactly when every tensor is bit-identical,
whatever the shard layout or the order the tensors were saved in. It also keeps, per tensor, a sha256 of its bytes and
its L2 norm (float64): a committed fingerprint (~40 KB for SmolLM2-135M) then names the tensors a rebuild changed and
by about how much (|norm difference| is a lower bound of the L2 norm of the difference), without the committed weights.
With both checkpoints on one machine, `max_abs_diff` gives the exact max |a - b| per tensor:

    python -m rlvr.weights diff DIR_A DIR_B             # the 10 tensors that differ most, by max |a - b|
    python -m rlvr.weights check RECORD DIR             # DIR's weights against a committed fingerprint (exit 1: differ)
    python -m rlvr.weights fingerprint DIR [-o FILE]    # DIR's fingerprint (JSON), for `check` on another machine

RECORD (`recorded_fingerprint`) is a pipeline stage's pipeline_stage.json (its `weights`), a file that `fingerprint
-o` wrote, or a study's committed unit record (rlvr.study.records), which keeps the sha256 of the weights the unit
started from: then a mismatch is known but not which tensors make it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.io import atomic_write_json


class WeightsError(ValueError):
    """A directory without safetensors weights where a checkpoint was expected."""


def weight_files(directory: Path) -> list[Path]:
    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise WeightsError(f"{directory} holds no *.safetensors file: give a checkpoint directory (e.g. an SFT run's "
                           "final/)")
    return files


def tensors(directory: Path):
    """(name, tensor) of every tensor in the directory's safetensors files, sorted by name."""
    from safetensors import safe_open

    handles = {}
    for path in weight_files(directory):
        handle = safe_open(str(path), framework="pt")
        handles.update({name: handle for name in handle.keys()})  # noqa: SIM118 (safe_open is not a mapping)
    for name in sorted(handles):
        yield name, handles[name].get_tensor(name)


def fingerprint(directory: Path) -> dict[str, Any]:
    """{"sha256": over every tensor, "tensors": {name: {"sha256", "dtype", "shape", "norm"}}}."""
    import torch

    total = hashlib.sha256()
    per_tensor = {}
    for name, tensor in tensors(directory):
        # raw bytes whatever the dtype (bf16 too); the total hashes each tensor's header and digest, so the bytes
        # are read and hashed once
        digest = hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy()).hexdigest()
        total.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0{digest}\n".encode())
        per_tensor[name] = {"sha256": digest, "dtype": str(tensor.dtype).removeprefix("torch."),
                            "shape": list(tensor.shape), "norm": float(tensor.double().norm())}
    return {"sha256": total.hexdigest(), "tensors": per_tensor}


@dataclass(frozen=True)
class Difference:
    name: str
    what: str  # "values", "shape/dtype", "missing", "extra"
    norm_change: float  # |norm(a) - norm(b)|; inf for a tensor on one side only or of another shape


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[Difference]:
    """The tensors whose bytes differ between two fingerprints, largest |norm change| first ([] when equal)."""
    if recorded["sha256"] == current["sha256"]:
        return []
    before, after = recorded["tensors"], current["tensors"]
    found = []
    for name in sorted(set(before) | set(after)):
        if name not in after or name not in before:
            found.append(Difference(name, "missing" if name not in after else "extra", math.inf))
        elif (before[name]["shape"], before[name]["dtype"]) != (after[name]["shape"], after[name]["dtype"]):
            found.append(Difference(name, "shape/dtype", math.inf))
        elif before[name]["sha256"] != after[name]["sha256"]:
            found.append(Difference(name, "values", abs(before[name]["norm"] - after[name]["norm"])))
    return sorted(found, key=lambda d: (-d.norm_change, d.name))


def describe(found: list[Difference], total: int, top: int = 5) -> str:
    """One line: how many tensors differ and the largest differences."""
    shown = ", ".join(f"{d.name} ({d.what}" + (f", |norm change| {d.norm_change:.3g})" if d.what == "values" else ")")
                      for d in found[:top])
    return f"{len(found)} of {total} tensors differ; largest: {shown}"


def max_abs_diff(a: Path, b: Path) -> list[tuple[str, float]]:
    """(name, max |a - b|) of every tensor of either checkpoint, largest first (inf: on one side only, or another
    shape)."""
    left, right = dict(tensors(a)), dict(tensors(b))
    found = []
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right or left[name].shape != right[name].shape:
            found.append((name, math.inf))
        else:
            found.append((name, float((left[name].double() - right[name].double()).abs().max())))
    return sorted(found, key=lambda item: -item[1])


def recorded_fingerprint(path: Path) -> tuple[dict[str, Any], str]:
    """(fingerprint, what it is) from a JSON record: a pipeline stage's record (its `weights`), a fingerprint file,
    or a study unit's record (the sha256 of its starting weights, without per-tensor entries)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WeightsError(f"{path} cannot be read as a JSON record ({err})") from err
    if isinstance(data, dict) and isinstance(data.get("weights"), dict) and "sha256" in data["weights"]:
        return data["weights"], f"the weights of pipeline stage {data.get('stage', '?')} ({path})"
    if isinstance(data, dict) and "sha256" in data and "tensors" in data:
        return data, f"the fingerprint in {path}"
    started = data.get("provenance", {}).get("model_sha256") if isinstance(data, dict) else None
    if started:
        return {"sha256": started, "tensors": {}}, f"the starting weights of study unit {data.get('key', '?')} ({path})"
    raise WeightsError(f"{path} holds no fingerprint: give a pipeline stage's pipeline_stage.json of a stage with "
                       "`weights`, a file written by `python -m rlvr.weights fingerprint DIR -o FILE`, or a study's "
                       "committed unit record (it keeps the sha256 of the weights the unit started from)")


def check(record: Path, directory: Path) -> tuple[bool, str]:
    """(whether DIR's weights are the recorded ones, a sentence saying so and, if not, what differs)."""
    stored, what = recorded_fingerprint(record)
    current = fingerprint(directory)
    if current["sha256"] == stored["sha256"]:
        return True, f"{directory}: the same weights as {what} (sha256 {current['sha256'][:16]}...)"
    if not stored["tensors"]:
        return False, (f"{directory}: sha256 {current['sha256'][:16]}... DIFFERS from {what}, "
                       f"{stored['sha256'][:16]}...; the record keeps no per-tensor fingerprint, so which tensors "
                       "differ is not known from it")
    found = differences(stored, current)
    return False, f"{directory} DIFFERS from {what}: {describe(found, len(stored['tensors']))}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlvr.weights", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    diff = commands.add_parser("diff", help="max |a - b| per tensor of two checkpoints on this machine")
    diff.add_argument("a", type=Path)
    diff.add_argument("b", type=Path)
    checking = commands.add_parser("check", help="a checkpoint against a recorded fingerprint (exit 1: differ)")
    checking.add_argument("record", type=Path, help="pipeline_stage.json, a fingerprint file or a study record")
    checking.add_argument("directory", type=Path, help="the checkpoint directory (*.safetensors)")
    printing = commands.add_parser("fingerprint", help="a checkpoint's fingerprint as JSON")
    printing.add_argument("directory", type=Path)
    printing.add_argument("-o", "--out", type=Path, help="also write the whole fingerprint (JSON) to this file")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            same, sentence = check(args.record, args.directory)
            print(sentence)
            return 0 if same else 1
        if args.command == "fingerprint":
            found = fingerprint(args.directory)
            if args.out is not None:
                atomic_write_json(args.out, found)
            print(f"{found['sha256']}  {args.directory} ({len(found['tensors'])} tensors)")
            return 0
        found = max_abs_diff(args.a, args.b)
    except WeightsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    differing = [(n, d) for n, d in found if d > 0]
    print(f"{len(differing)} of {len(found)} tensors differ; max |a - b| overall {found[0][1] if found else 0:.3g}")
    for name, diff_value in differing[:10]:
        print(f"  {diff_value:.3g}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
