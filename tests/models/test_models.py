"""The offline model kit: registry resolution, atomic preparation, the tool chat template, real generation."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from rlvr import models
from rlvr.cli import app

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "wiki_search",
            "description": "Search Wikipedia.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Answer with the tool."},
    {"role": "user", "content": "Who wrote Hamlet?"},
    {
        "role": "assistant",
        "content": "Let me search.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "wiki_search", "arguments": '{"query": "Hamlet"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "Hamlet is a tragedy by William Shakespeare."},
    {"role": "assistant", "content": "William Shakespeare"},
]


def test_chat_template_renders_tool_call_and_result(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nAnswer with the tool.\n\n# Tools")
    assert '\n<tools>\n{"type": "function", "function": {"name": "wiki_search"' in text
    assert (
        '<|im_start|>assistant\nLet me search.\n<tool_call>\n{"name": "wiki_search", "arguments": {"query": "Hamlet"}}'
        "\n</tool_call><|im_end|>\n"
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\nHamlet is a tragedy by William Shakespeare.\n</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\nWilliam Shakespeare<|im_end|>\n<|im_start|>assistant\n")
    # the JSON between the tags is what vLLM's hermes parser decodes
    call = text.split("<tool_call>\n")[-1].split("\n</tool_call>")[0]
    assert json.loads(call) == {"name": "wiki_search", "arguments": {"query": "Hamlet"}}


def test_chat_template_without_tools_has_default_system_prompt(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tiny_random_shape_fits_vllm_cpu(tiny_model):
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["head_dim"] == 64  # vLLM's CPU attention rejects 16
    assert config["num_hidden_layers"] == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert tokenizer.eos_token == "<|im_end|>"
    assert config["vocab_size"] == len(tokenizer)


def _greedy(path, prompt: str, max_new_tokens: int = 12) -> str:
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def test_greedy_generation_is_deterministic(tiny_model):
    first = _greedy(tiny_model, "Count to three.")
    assert first  # a random model still emits tokens
    assert _greedy(tiny_model, "Count to three.") == first


def test_tiny_random_is_seeded(tiny_model, tmp_path):
    models.build_tiny_random(tmp_path)
    from safetensors.torch import load_file

    rebuilt, cached = load_file(tmp_path / "model.safetensors"), load_file(tiny_model / "model.safetensors")
    assert rebuilt.keys() == cached.keys()
    assert all(torch.equal(rebuilt[k], cached[k]) for k in rebuilt)


def test_smollm2_is_a_plain_unquantized_checkpoint(smol_model):
    config = json.loads((smol_model / "config.json").read_text())
    assert "quantization_config" not in config  # vLLM would try to read the safetensors as GGUF
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576


@pytest.mark.slow
def test_smollm2_answers_capital_of_france(smol_model):
    answer = _greedy(smol_model, "What is the capital of France? Answer with one word.")
    assert "Paris" in answer


def test_prepare_is_instant_the_second_time(tiny_model):
    stamp = tiny_model / models.STAMP_FILE
    before = stamp.stat().st_mtime_ns
    assert models.prepare("tiny-random") == tiny_model
    assert stamp.stat().st_mtime_ns == before  # nothing was rebuilt


def test_killed_prepare_leaves_no_half_model(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))

    def crash(out):
        (out / "config.json").write_text("{}")
        raise KeyboardInterrupt  # what a kill during the build looks like from inside

    monkeypatch.setitem(models.REGISTRY, "tiny-random", models.RegisteredModel("tiny-random", "", crash))
    with pytest.raises(KeyboardInterrupt):
        models.prepare("tiny-random")
    assert not models.is_prepared("tiny-random")
    assert list((tmp_path / "models").iterdir()) == []


def test_processes_preparing_a_model_at_once_build_it_once(tmp_path, monkeypatch):
    """Parallel test workers (or servers started together) on a fresh cache: one builds, the others wait and read
    its model; none replaces the directory under a reader."""
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    builds = tmp_path / "builds.txt"

    def slow_build(out):
        with builds.open("a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.0)  # long enough for the other process to find the model missing and wait
        (out / "config.json").write_text("{}")

    monkeypatch.setitem(models.REGISTRY, "tiny-random", models.RegisteredModel("tiny-random", "", slow_build))
    context = multiprocessing.get_context("fork")  # the children inherit the patched registry
    with context.Pool(2) as pool:
        paths = pool.map(models.prepare, ["tiny-random", "tiny-random"])
    assert paths == [tmp_path / "models" / "tiny-random"] * 2
    assert len(builds.read_text().splitlines()) == 1
    assert models.is_prepared("tiny-random")


def test_resolve_passes_paths_and_hub_ids_through(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text("{}")  # a model directory (an empty one is refused: test_adapters.py)
    assert models.resolve(str(tmp_path)) == str(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert models.resolve("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"


def test_resolve_offline_hub_id_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(models.ModelError, match="HF_HUB_OFFLINE=1 and it is not in the local hub cache"):
        models.resolve("someone/not-downloaded-model")
    with pytest.raises(models.ModelError, match="registered model"):
        models.resolve("no-such-model")


def test_cli_models_list_and_path(tiny_model):
    runner = CliRunner()
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0, listed.output
    assert "tiny-random" in listed.output and "smollm2-135m" in listed.output
    located = runner.invoke(app, ["models", "path", "tiny-random"])
    assert located.exit_code == 0 and located.output.strip() == str(tiny_model)
    unknown = runner.invoke(app, ["models", "prepare", "gpt-17"])
    assert unknown.exit_code == 2 and "unknown model 'gpt-17'" in unknown.output
