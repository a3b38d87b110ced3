"""Every TOML in configs/train loads through `rlvr train`'s reader and builds its algorithm's configuration; its
environment is installed and takes its env_args. Settings that need CUDA (bf16) are checked as values and the rest of the
config is built without them on a machine without a GPU."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest
import torch

from rlvr.cli.train import read_config
from rlvr.evaluation import installed_environment_names
from rlvr.trainer import ALGORITHMS, MTGRPOConfig, build_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs" / "train").glob("*.toml"))
NEEDS_CUDA = {"bf16": False}  # field -> the value to build with when CUDA is missing
NORMALISED = {"report_to"}  # transformers turns the string into a list


def test_the_expected_configs_exist():
    assert {p.name for p in CONFIGS} >= {"triviaqa_mt_grpo_cpu.toml", "triviaqa_mt_grpo_gpu.toml",
                                         "gsm8k_mt_grpo_cpu.toml", "musique_mt_grpo_cpu.toml"}


def test_cuda_only_fields_exist():
    assert set(NEEDS_CUDA) <= {f.name for f in dataclasses.fields(MTGRPOConfig)}


def build(data: dict, tmp_path: Path):
    training = dict(data["training"])
    if not torch.cuda.is_available():
        training.update({k: v for k, v in NEEDS_CUDA.items() if k in training})
    return build_config(data["algo"], {"output_dir": str(tmp_path), **training})


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_builds(path, tmp_path):
    data = read_config(path)
    assert data["env"] in installed_environment_names()
    assert data["algo"] in ALGORITHMS and data["model"]
    loader = importlib.import_module(data["env"].replace("-", "_")).load_environment
    parameters = inspect.signature(loader).parameters
    unknown = set(data.get("env_args", {})) - set(parameters)  # load_environment's **kwargs would swallow typos
    assert not unknown, f"{path.name}: {data['env']} has no argument(s) {sorted(unknown)}"
    config = build(data, tmp_path)
    for key, value in data["training"].items():
        if key not in NORMALISED and (key not in NEEDS_CUDA or torch.cuda.is_available()):
            assert getattr(config, key) == value, key
    assert config.max_tokens == data["training"]["max_tokens_per_turn"]
    if path.name.endswith("_cpu.toml"):
        assert not config.bf16 and data["model"] in ("smollm2-135m", "tiny-random")


def test_gpu_config_is_the_papers(tmp_path, monkeypatch):
    """Zeng et al. 2025 (arXiv:2505.11821): Qwen2.5-7B, 21 rollouts, lr 1e-6, beta 0, 2 iterations, 300 steps."""
    data = read_config(CONFIGS[0].parent / "triviaqa_mt_grpo_gpu.toml")
    training = data["training"]
    assert data["model"] == "Qwen/Qwen2.5-7B-Instruct" and data["env_args"]["protocol"] == "xml"
    assert (training["rollouts_per_example"], training["learning_rate"], training["beta"]) == (21, 1e-6, 0.0)
    assert (training["num_iterations"], training["max_steps"]) == (2, 300)
    assert training["credit"] == {"coef": 1.0}  # MT-GRPO's turn coefficient, in the estimator's own name
    assert training["use_lora"] is False and training["bf16"] is True
    # the paper's 7 training GPUs: the batch splits over them in whole micro-batches
    monkeypatch.setenv("WORLD_SIZE", "7")
    config = build(data, tmp_path)
    assert config.batch_size % config.rollouts_per_example == 0
    assert config.batch_size % (config.micro_batch_size * 7) == 0
    assert config.weight_sync == "auto"  # nccl on GPUs, and buildable here
