"""LoRA adapter directories as models: `rlvr.models.resolve` turns one into its base with the adapter merged in,
built once into the cache (the same adapter gives the same directory), and refuses what it cannot use with one
clear error; a server loads an adapter's merge (the study's evaluation of a LoRA cell). Real peft adapters on
tiny-random; the last test uses the session's training server."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from rlvr import models
from rlvr.cli import app
from rlvr.serve import load_saved_weights
from rlvr.weights import differences, fingerprint


def make_adapter(base, out, base_name: str):
    """A rank-2 adapter whose B factors are random (peft starts them at zero, a no-op), naming `base_name`."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(r=2, lora_alpha=4, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, config)
    peft_model.peft_config["default"].base_model_name_or_path = base_name
    peft_model.save_pretrained(out)
    return out


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_adapter_resolves_to_its_merge_once(tmp_path, home, tiny_model):
    adapter = make_adapter(tiny_model, tmp_path / "adapter", str(tiny_model))
    path = models.resolve(str(adapter))
    merged = home / "models" / "merged" / models.adapter_key(adapter)[:32]
    assert path == str(merged) and (merged / "model.safetensors").is_file() and (merged / "tokenizer.json").is_file()
    assert differences(fingerprint(tiny_model), fingerprint(merged))  # the adapter changed the weights

    # the merged model computes what the base with the adapter computes
    ids = torch.arange(1, 9)[None]
    with torch.no_grad():
        full = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)(input_ids=ids).logits
        base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, adapter)(input_ids=ids).logits
    assert torch.allclose(full, adapted, atol=1e-5)

    stamp = merged / models.MERGED_STAMP
    before = stamp.stat().st_mtime_ns
    copy = shutil.copytree(adapter, tmp_path / "copy")  # the same adapter elsewhere (e.g. a fresh clone's)
    assert models.resolve(str(copy)) == str(merged)
    assert stamp.stat().st_mtime_ns == before  # nothing was merged again
    assert json.loads(stamp.read_text())["base"] == str(tiny_model)


def test_another_adapter_gets_another_merge(tmp_path, home, tiny_model):
    first = make_adapter(tiny_model, tmp_path / "a", str(tiny_model))
    config = json.loads((first / models.ADAPTER_CONFIG).read_text())
    second = shutil.copytree(first, tmp_path / "b")
    (second / models.ADAPTER_CONFIG).write_text(json.dumps({**config, "lora_alpha": 8}))  # another scale
    assert models.resolve(str(first)) != models.resolve(str(second))


def test_directory_that_is_no_model(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(models.ModelError, match="holds neither a model .config.json. nor a LoRA adapter"):
        models.resolve(str(tmp_path))


@pytest.mark.parametrize("base, message", [
    ("no-such-model", r"base model 'no-such-model' cannot be found offline: model 'no-such-model' is neither"),
    ("nobody/not-cached", r"base model 'nobody/not-cached' cannot be found offline: .*HF_HUB_OFFLINE=1"),
])
def test_adapter_whose_base_cannot_be_found(tmp_path, home, tiny_model, monkeypatch, base, message):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    adapter = make_adapter(tiny_model, tmp_path / "adapter", base)
    with pytest.raises(models.ModelError, match=message):
        models.resolve(str(adapter))
    assert not (home / "models" / "merged").exists() or not any((home / "models" / "merged").iterdir())


def test_adapter_without_weights(tmp_path, home, tiny_model):
    adapter = make_adapter(tiny_model, tmp_path / "adapter", str(tiny_model))
    (adapter / models.ADAPTER_WEIGHTS).unlink()
    with pytest.raises(models.ModelError, match="has adapter_config.json but no adapter_model.safetensors"):
        models.resolve(str(adapter))


def test_cli_refuses_a_directory_that_is_no_model(tmp_path):
    result = CliRunner().invoke(app, ["train", "--algo", "sft", "--dataset", str(tmp_path), "--model", str(tmp_path),
                                      "-o", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert "holds neither a model" in " ".join(result.output.replace("│", " ").split()), result.output


def served_logprobs(server) -> tuple[list[int], list[int], list[float]]:
    """A greedy answer of the server: prompt ids, completion ids and their logprobs."""
    from openai import OpenAI

    response = OpenAI(base_url=server.base_url, api_key="local").chat.completions.create(
        model=server.model, messages=[{"role": "user", "content": "Count to five."}], max_tokens=8, temperature=0.0,
        logprobs=True, extra_body={"return_token_ids": True, "ignore_eos": True})
    choice = response.choices[0]
    return response.prompt_token_ids, choice.token_ids, [t.logprob for t in choice.logprobs.content]


def teacher_forced(model_dir, prompt: list[int], completion: list[int]) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        logprobs = model(torch.tensor([prompt + completion])).logits[0].log_softmax(-1)
    return [logprobs[len(prompt) - 1 + i, t].item() for i, t in enumerate(completion)]  # position t predicts t + 1


@pytest.mark.slow
def test_a_server_loads_an_adapters_merge(tmp_path, home, tiny_model, training_server):
    """rlvr.serve.load_saved_weights (a study's evaluation of a cell's final/) given an adapter serves its merge: the
    server's logprobs are a transformers forward of the merged weights (fp32 both sides: 1e-3, as
    tests/serve/test_weight_sync.py), and not the base's."""
    adapter = make_adapter(tiny_model, tmp_path / "adapter", str(tiny_model))
    load_saved_weights(training_server.url, adapter)
    prompt, completion, served = served_logprobs(training_server)
    merged = models.resolve(str(adapter))
    assert max(abs(a - b) for a, b in zip(served, teacher_forced(merged, prompt, completion), strict=True)) < 1e-3
    base = teacher_forced(tiny_model, prompt, completion)
    assert max(abs(a - b) for a, b in zip(served, base, strict=True)) > 0.05
