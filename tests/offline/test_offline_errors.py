"""Bad input to the offline commands: a clean exit with a message that says what is wrong and what to do, before
any model is trained. No server needed."""

from __future__ import annotations

import json

import pytest
import verifiers  # noqa: F401  (imported before the runner swaps stderr: its log handler keeps the real one)
from transformers import AutoTokenizer
from typer.testing import CliRunner

from rlvr.cli import app
from rlvr.offline.oreo import load_value_model
from rlvr.offline.search import Candidate, SearchConfig, SearchError, ValueModel, search_client, select

PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]
COMPLETION = [{"role": "assistant", "content": "2 + 3 = 5\nAnswer: 5"}]


def rlvr(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    text = "".join(result.output.replace("│", " ").split())
    return result, text


def says(text: str, words: str) -> bool:
    return "".join(words.split()) in text


def write(path, records):
    path.mkdir(parents=True, exist_ok=True)
    (path / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_dataset_without_rewards(tmp_path):
    data = write(tmp_path / "d", [{"example_id": 0, "prompt": PROMPT, "completion": COMPLETION}])
    result, text = rlvr("train", "--algo", "oreo", "--dataset", data, "--model", "tiny-random", "-o", tmp_path / "r")
    assert result.exit_code == 2, result.output
    assert says(text, "has no 'reward'") and says(text, "rlvr collect"), result.output


def test_dataset_without_segmentation(tmp_path):
    data = write(tmp_path / "d", [{"example_id": 0, "prompt": PROMPT, "completion": COMPLETION, "reward": 1.0}])
    result, text = rlvr("train", "--algo", "oreo", "--dataset", data, "--model", "tiny-random", "-o", tmp_path / "r")
    assert result.exit_code == 2, result.output
    assert says(text, "no step segmentation") and says(text, "--set segmentation=line"), result.output


def test_rejection_sampling_without_a_success(tmp_path):
    data = write(tmp_path / "d", [{"example_id": 0, "prompt": PROMPT, "completion": COMPLETION, "reward": 0.0,
                                   "steps": [[0, 0]]}])
    result, text = rlvr("train", "--algo", "sft", "--dataset", data, "--model", "tiny-random", "-o", tmp_path / "r")
    assert result.exit_code == 2, result.output
    assert says(text, "no trajectory has reward >= 1.0"), result.output


@pytest.mark.parametrize("args, message", [
    (("--algo", "oreo", "--model", "tiny-random"), "--algo oreo trains from collected trajectories: give --dataset"),
    (("--algo", "mt_grpo", "--model", "tiny-random", "--env", "vf-arithmetic", "--dataset", "x"),
     "--dataset is for the offline algorithms"),
    (("--algo", "oreo", "--dataset", "x"), "give --model"),
    (("--algo", "oreo", "--dataset", "x", "--model", "tiny-random", "--set", "beta=0"), "beta=0 must be > 0"),
    (("--algo", "oreo", "--dataset", "x", "--model", "tiny-random", "--set", "batch_size=6"),
     "batch_size=6 must be a positive multiple of micro_batch_size=4"),
])
def test_plan_errors(tmp_path, args, message):
    result, text = rlvr("train", *args, "-o", tmp_path / "r")
    assert result.exit_code == 2, result.output
    assert says(text, message), result.output


@pytest.mark.parametrize("extra, message", [
    (("--dtype", "fp8"), "--dtype must be one of auto, half, float16, bfloat16, float, float32, got 'fp8'"),
    (("--dtype", "float32", "--endpoint", "http://127.0.0.1:9"),
     "start it with `rlvr serve --model tiny-random --dtype float32` and drop --dtype here"),
])
def test_collect_dtype_errors(tmp_path, extra, message):
    result, text = rlvr("collect", "--env", "vf-arithmetic", "--model", "tiny-random", "-o", tmp_path / "c", *extra)
    assert result.exit_code == 2, result.output
    assert says(text, message), result.output
    assert not (tmp_path / "c").exists()


def test_value_model_for_another_tokenizer(tmp_path, tiny_model):
    other = AutoTokenizer.from_pretrained(tiny_model)
    other.add_tokens(["<step>"])  # a tokenizer that reads the same text into other ids
    value = load_value_model(str(tiny_model), zero_head=True)
    value.save_pretrained(tmp_path / "value")
    other.save_pretrained(tmp_path / "value")
    with pytest.raises(SearchError, match="uses another tokenizer than the policy"):
        ValueModel(tmp_path / "value", AutoTokenizer.from_pretrained(tiny_model))
    with pytest.raises(SearchError, match="no value model at"):
        ValueModel(tmp_path / "nowhere", other)


def test_search_needs_a_value_model(tiny_model):
    with pytest.raises(SearchError, match="give --value-model DIR"):
        search_client("http://127.0.0.1:9/v1", "tiny-random", "tiny-random", None, "beam", 4)
    with pytest.raises(SearchError, match="search mode 'greedy' is not one of"):
        SearchConfig(mode="greedy")


def test_select_keeps_the_highest_values_in_order():
    candidates = [Candidate(t, False) for t in "abcd"]
    assert [c.text for c in select(candidates, [0.1, 0.9, 0.5, 0.9], 2)] == ["b", "d"]
