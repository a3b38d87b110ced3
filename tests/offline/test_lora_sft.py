"""SFT with `use_lora = true` (`rlvr train --algo sft`): final/ is a LoRA adapter naming its base by its registered
name, its fingerprint is the adapter's, a stopped run resumes to the same adapter, and `--model final/` trains from
the adapter merged into the base. Real TRL / peft training of tiny-random on the arithmetic expert's trajectories;
no server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import verifiers  # noqa: F401  (imported before the runner swaps stderr: its log handler keeps the real one)
from typer.testing import CliRunner

from rlvr import models
from rlvr.cli import app
from rlvr.trainer.policy import load_policy
from rlvr.weights import differences, fingerprint

pytestmark = pytest.mark.slow


@pytest.fixture
def expert(tmp_path):
    from vf_arithmetic import load_environment
    from vf_arithmetic.expert import export_expert_dataset

    return export_expert_dataset(load_environment(num_train_examples=4, num_eval_examples=2), tmp_path / "expert")


def train(expert, run_dir, *extra):
    result = CliRunner().invoke(app, [str(a) for a in (
        "train", "--algo", "sft", "--dataset", expert, "--model", "tiny-random", "-o", run_dir,
        "--set", "use_lora=true", "--set", "lora_rank=4", "--set", "learning_rate=1e-2", "--set", "max_steps=2",
        "--set", "save_steps=1", "--set", "save_total_limit=2", "--set", "batch_size=2",
        "--set", "micro_batch_size=2", "--set", "progress=false", "--set", "max_length=512", *extra)])
    assert result.exit_code == 0, f"{result.output[-3000:]}\n{result.exception!r}"


def test_sft_with_lora_writes_an_adapter_that_resolves_to_its_merge(tmp_path, expert, tiny_model):
    train(expert, tmp_path / "sft")
    final = tmp_path / "sft" / "final"
    assert sorted(p.name for p in final.glob("*.safetensors")) == [models.ADAPTER_WEIGHTS]
    config = json.loads((final / models.ADAPTER_CONFIG).read_text())
    assert config["base_model_name_or_path"] == "tiny-random" and config["r"] == 4  # portable: no cache path
    assert all(".lora_A." in name or ".lora_B." in name for name in fingerprint(final)["tensors"])
    # a run stopped after step 1 resumes from its adapter checkpoint to the same adapter, bit for bit
    cut = shutil.copytree(tmp_path / "sft", tmp_path / "cut")
    shutil.rmtree(cut / "final")
    shutil.rmtree(cut / "checkpoint-2")
    train(expert, cut, "--resume")
    assert fingerprint(cut / "final")["sha256"] == fingerprint(final)["sha256"]

    merged = Path(models.resolve(str(final)))
    try:
        assert merged.parent == models.models_dir() / "merged"
        assert differences(fingerprint(tiny_model), fingerprint(merged))  # trained: B moved off zero
        policy, tokenizer = load_policy(str(final), bf16=False)  # what `rlvr train --model final/` starts from
        state = policy.state_dict()
        from safetensors.torch import load_file

        saved = load_file(merged / "model.safetensors")
        assert all(torch.equal(state[name], tensor) for name, tensor in saved.items())
        assert tokenizer.chat_template == models.TOOL_CHAT_TEMPLATE
        assert models.resolve(str(final)) == str(merged)
    finally:
        shutil.rmtree(merged, ignore_errors=True)  # the real cache: this adapter is the test's own
