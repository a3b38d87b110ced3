"""Fingerprints of a checkpoint's weights, to check that a rebuilt starting model is the committed one.

`fingerprint(DIR)`: a sha256 over every tensor of DIR's *.safetensors files in a canonical order (sorted by name; per
tensor its name, dtype, shape and the sha256 of its raw bytes), so two checkpoints hash alike exactly when every tensor is bit-identical,
whatever the shard layout or the order the tensors were saved in. It also keeps, per tensor, a sha256 of its bytes and
its L2 norm (float64): a committed fingerprint (~40 KB for SmolLM2-135M) then names the tensors a rebuild changed and
by about how much (|norm difference| is a lower bound of the L2 norm of the difference), without the committed weights.
With both checkpoints on one machine, `max_abs_diff` gives the exact max |a - b| per tensor:

    python -m rlvr.weights DIR_A DIR_B      # the 10 tensors that differ most, by max |a - b|
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m rlvr.weights CHECKPOINT_A CHECKPOINT_B", file=sys.stderr)
        return 2
    found = max_abs_diff(Path(argv[0]), Path(argv[1]))
    differing = [(n, d) for n, d in found if d > 0]
    print(f"{len(differing)} of {len(found)} tensors differ; max |a - b| overall {found[0][1] if found else 0:.3g}")
    for name, diff in differing[:10]:
        print(f"  {diff:.3g}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
