"""The client's weight file (`rlvr.serve.staging`): tied tensors stored once, in-place rewrites, stale directories.

No server needed; what the server reads back is read here with safetensors and `protocol.parse_aliases`, as the
worker extension does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load

from rlvr.serve.cpu_routes import weights_file
from rlvr.serve.protocol import ALIASES_METADATA_KEY, aliases_metadata, parse_aliases
from rlvr.serve.staging import StagingFile, remove_stale, state_tensors


def read_back(path: Path) -> dict[str, torch.Tensor]:
    """Every name the server loads from `path`, aliases included (as `WeightSyncWorkerExtension` reads it)."""
    with safe_open(str(path), framework="pt") as f:
        names = list(f.keys())
        loaded = {name: f.get_tensor(name).clone() for name in names}
        aliases = parse_aliases(f.metadata(), names)
    return {**loaded, **{alias: loaded[stored] for alias, stored in aliases.items()}}


def tied_state() -> dict[str, torch.Tensor]:
    embed = torch.randn(10, 4)
    return {"model.embed_tokens.weight": embed, "lm_head.weight": embed, "model.norm.weight": torch.ones(4)}


def test_a_tied_tensor_is_stored_once_and_loaded_under_both_names(tmp_path):
    state = tied_state()
    tensors = state_tensors(state)
    assert list(tensors.tensors) == ["model.embed_tokens.weight", "model.norm.weight"]
    assert tensors.aliases == {"lm_head.weight": "model.embed_tokens.weight"}
    assert (
        tensors.tensors["model.embed_tokens.weight"].data_ptr() == state["lm_head.weight"].data_ptr()
    )  # no copy
    assert tensors.num_names == 3 and tensors.nbytes == (40 + 4) * 4
    staging = StagingFile(tmp_path)
    loaded = read_back(staging.write(tensors))
    assert set(loaded) == set(state) and all(torch.equal(loaded[n], t) for n, t in state.items())


def test_tensors_that_overlap_without_being_the_same_are_cloned():
    fused = torch.randn(6, 4)
    state = {"q.weight": fused[:2], "kv.weight": fused[2:], "all.weight": fused}
    tensors = state_tensors(state)
    assert tensors.aliases == {}
    pointers = {t.untyped_storage().data_ptr() for t in tensors.tensors.values()}
    assert len(pointers) == 3  # safetensors refuses shared storage
    assert all(torch.equal(tensors.tensors[n], t) for n, t in state.items())


def test_bad_state_dicts_are_refused():
    with pytest.raises(ValueError, match="empty"):
        state_tensors({})
    with pytest.raises(TypeError, match="state_dict\\['w'\\]"):
        state_tensors({"w": [1.0, 2.0]})


@settings(max_examples=25, deadline=None)
@given(
    shapes=st.lists(st.lists(st.integers(1, 5), min_size=0, max_size=3), min_size=1, max_size=4),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    tie=st.booleans(),
)
def test_the_http_body_round_trips_any_state_dict(shapes, dtype, tie):
    state = {f"layer.{i}.weight": torch.randn(shape).to(dtype) for i, shape in enumerate(shapes)}
    if tie:
        state["tied.weight"] = state["layer.0.weight"]
    tensors = state_tensors(state)
    body = tensors.to_bytes()
    stored = load(body)
    loaded = {**stored, **{alias: stored[name] for alias, name in tensors.aliases.items()}}
    assert set(loaded) == set(state)
    assert all(torch.equal(loaded[n], t) and loaded[n].dtype == dtype for n, t in state.items())


def test_the_staging_file_is_private_and_accepted_by_the_server_check(tmp_path):
    staging = StagingFile(tmp_path)
    path = staging.write(state_tensors(tied_state()))
    assert path.parent.parent == tmp_path and path.parent.name.startswith("rlvr-weights-")
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert os.listdir(path.parent) == [path.name]
    assert weights_file(str(path), [tmp_path]) == path.resolve()
    staging.remove()
    assert list(tmp_path.iterdir()) == []


def test_updates_with_the_same_layout_overwrite_the_file_in_place(tmp_path):
    staging = StagingFile(tmp_path)
    state = tied_state()
    path = staging.write(state_tensors(state))
    inode = path.stat().st_ino
    for step in range(3):
        new = {name: tensor + step + 1 for name, tensor in state.items()}
        new["lm_head.weight"] = new["model.embed_tokens.weight"]  # still tied
        assert staging.write(state_tensors(new)) == path
        assert path.stat().st_ino == inode
        loaded = read_back(path)
        assert all(torch.equal(loaded[n], t) for n, t in new.items())


@pytest.mark.parametrize(
    "change",
    [
        lambda s: {**s, "model.norm.weight": torch.ones(5)},  # shape
        lambda s: {**s, "model.norm.weight": torch.ones(4, dtype=torch.bfloat16)},  # dtype
        lambda s: {**s, "extra.bias": torch.zeros(2)},  # a new name
        lambda s: {**s, "lm_head.weight": s["lm_head.weight"].clone()},  # untied
    ],
)
def test_a_new_layout_rewrites_the_file(tmp_path, change):
    staging = StagingFile(tmp_path)
    staging.write(state_tensors(tied_state()))
    new = change(tied_state())
    loaded = read_back(staging.write(state_tensors(new)))
    assert set(loaded) == set(new)
    assert all(torch.equal(loaded[n], t) and loaded[n].dtype == t.dtype for n, t in new.items())


def test_only_directories_of_dead_clients_are_removed(tmp_path):
    live = StagingFile(tmp_path)
    live.write(state_tensors({"w": torch.zeros(2)}))
    dead = StagingFile(tmp_path)
    dead.write(state_tensors({"w": torch.zeros(2)}))
    dead_dir = dead.directory
    dead._remove.detach()  # as if its process were killed: the lock goes, the directory stays
    os.close(dead._dir_fd)
    young = tmp_path / "rlvr-weights-just-made"  # a client between mkdir and lock
    young.mkdir(mode=0o700)
    unrelated = tmp_path / "other-dir"
    unrelated.mkdir()
    old = time.time() - 3600
    for directory in (live.directory, dead_dir, unrelated):
        os.utime(directory, (old, old))
    assert remove_stale(tmp_path) == [dead_dir]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.directory.name, young.name, unrelated.name]
    )
    # A new client sweeps too.
    os.utime(young, (old, old))
    StagingFile(tmp_path).remove()
    assert not young.exists() and live.directory.exists()


def test_aliases_in_the_header_must_name_stored_tensors():
    assert parse_aliases(None, ["a"]) == {}
    assert parse_aliases(aliases_metadata({"b": "a"}), ["a"]) == {"b": "a"}
    for text in ('{"b": "missing"}', '{"a": "a"}', '["b"]', "not json"):
        with pytest.raises(ValueError, match=ALIASES_METADATA_KEY):
            parse_aliases({ALIASES_METADATA_KEY: text}, ["a"])
