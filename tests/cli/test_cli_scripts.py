"""scripts/: the MuSiQue wrappers run as scripts and pass their flags through to rlvr's commands; the shell
launchers parse, and in dry-run mode print the `rlvr train` command lines of the paper's GPU and the CPU settings,
which `rlvr train` accepts."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import assert_png, invoke, read_jsonl
from typer.testing import CliRunner

from rlvr.cli.train import apply_override, read_config
from rlvr.trainer import build_config

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
CPU_CONFIG = str(REPO / "configs" / "train" / "triviaqa_mt_grpo_cpu.toml")
GPU_CONFIG = str(REPO / "configs" / "train" / "triviaqa_mt_grpo_gpu.toml")
PAPER_SETS = ["--set", "rollouts_per_example=21", "--set", "learning_rate=1e-6", "--set", "beta=0",
              "--set", "num_iterations=2", "--set", "max_steps=300", "--set", "bf16=true", "--set", "use_lora=false"]
SHELL_SCRIPTS = ("run_mt_grpo.sh", "run_grpo.sh", "run_ms_po.sh")


@pytest.fixture(scope="module")
def musique_scripts():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import evaluate_musique
        import train_musique
    finally:
        sys.path.remove(str(SCRIPTS))
    return train_musique, evaluate_musique


@pytest.mark.parametrize(("script", "commands"), [("train_musique.py", ("train", "predict")),
                                                  ("evaluate_musique.py", ("evaluate", "benchmark", "analyze"))])
def test_musique_scripts_help(script, commands):
    result = subprocess.run([sys.executable, str(SCRIPTS / script), "--help"], capture_output=True, text=True,
                            timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert result.returncode == 0, result.stderr
    for command in commands:
        assert command in result.stdout


@pytest.mark.parametrize(("module", "command", "flags"), [
    (0, "train", ("--num-train-examples", "--max-steps", "--retriever", "--verbose", "--config", "--set")),
    (0, "predict", ("--dataset-split", "--num-examples", "--retriever", "--verbose", "--endpoint")),
    (1, "evaluate", ("--dataset-split", "--num-examples", "--retriever", "--verbose", "--endpoint")),
    (1, "benchmark", ("--models", "--retrievers", "--num-examples", "--verbose")),
    (1, "analyze", ("directory",)),
])
def test_musique_command_flags(musique_scripts, module, command, flags):
    result = CliRunner().invoke(musique_scripts[module].app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for flag in flags:
        assert flag in result.output, flag


@pytest.mark.slow
def test_musique_evaluate_predict_analyze_through_the_wrappers(musique_scripts, tiny_server, tmp_path):
    train_musique, evaluate_musique = musique_scripts
    out = tmp_path / "eval"
    result = invoke(evaluate_musique.app, "evaluate", "--endpoint", tiny_server.base_url, "--retriever", "golden",
                    "--num-examples", "2", "--max-tokens", "8", "--out", out)
    assert result.exit_code == 0, result
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["env_id"] == "vf-musique"
    assert metadata["env_args"] == {"dataset": "synthetic", "retriever": "golden"}
    assert metadata["sampling_seed"] == 0  # seeded as `rlvr evaluate` is (the wrapper passes every option)
    assert len(read_jsonl(out / "results.jsonl")) == 2

    result = invoke(evaluate_musique.app, "analyze", out)
    assert result.exit_code == 0, result
    assert "| vf-musique | tiny-random | 2 |" in (out / "analysis.md").read_text()

    predictions = tmp_path / "pred"
    result = invoke(train_musique.app, "predict", "--endpoint", tiny_server.base_url, "--dataset-split", "train",
                    "--num-examples", "1", "--retriever", "bm25", "--max-tokens", "8", "--out", predictions)
    assert result.exit_code == 0, result
    (record,) = read_jsonl(predictions / "predictions.jsonl")
    assert record["prompt"] and "retrieval_recall" in record["metrics"]

    result = invoke(train_musique.app, "predict", "--endpoint", tiny_server.base_url, "--dataset-split", "test")
    assert result.exit_code == 2 and result.says("use one of train, validation, dev, eval"), result


def test_musique_train_wrapper_reaches_the_trainer(musique_scripts, tmp_path):
    """Flags arrive in `rlvr train` (config, env args, --max-steps): it stops only at the unreachable server."""
    result = invoke(musique_scripts[0].app, "train", "--model", "tiny-random", "--max-steps", "3",
                    "--num-train-examples", "8", "--retriever", "golden", "--server", "http://127.0.0.1:9",
                    "--run-dir", tmp_path / "run", "--set", "report_to=none")
    assert result.exit_code == 2, result
    assert result.says("the rollout server at http://127.0.0.1:9 is unreachable"), result
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["env_args"] == {"retriever": "golden", "max_turns": 4, "hops": [2], "num_train_examples": 8,
                                  "num_eval_examples": 32, "dataset": "synthetic"}
    assert config["training"]["max_steps"] == 3 and config["model"] == "tiny-random"


@pytest.mark.parametrize("script", [*SHELL_SCRIPTS, "_rlvr_train.sh"])
def test_shell_scripts_parse(script):
    result = subprocess.run(["bash", "-n", str(SCRIPTS / script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def dry_run(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("DEVICE", "SERVER", "NUM_PROCESSES", "MAX_STEPS", "STEP_REWARDS")}
    environ.update(DRY_RUN="1", RLVR="rlvr", ACCELERATE="accelerate", RUN_DIR="runs/x", **env)
    return subprocess.run(["bash", str(SCRIPTS / script), *args], capture_output=True, text=True, env=environ,
                          timeout=60)


def command_of(script: str, *args: str, **env: str) -> list[str]:
    result = dry_run(script, *args, **env)
    assert result.returncode == 0, result.stderr
    return shlex.split(result.stdout)


@pytest.mark.parametrize(("script", "env", "algo"), [
    ("run_mt_grpo.sh", {}, "mt_grpo"),
    ("run_ms_po.sh", {}, "ms_po"),
    ("run_grpo.sh", {}, "grpo"),
    ("run_grpo.sh", {"STEP_REWARDS": "1"}, "grpo_mr"),
])
def test_dry_run_command_lines(script, env, algo):
    gpu = ["rlvr", "train", "--config", GPU_CONFIG, "--algo", algo, *PAPER_SETS, "--run-dir", "runs/x"]
    cpu = ["rlvr", "train", "--config", CPU_CONFIG, "--algo", algo, "--set", "max_steps=20", "--run-dir", "runs/x"]
    assert command_of(script, **env) == gpu  # the paper's setting is the default
    assert command_of(script, "gpu", **env) == gpu
    assert command_of(script, "cpu", **env) == cpu
    assert command_of(script, **env, DEVICE="cpu") == cpu
    assert command_of(script, "cpu", "--set", "seed=3", **env, MAX_STEPS="5") == [
        *cpu[:-4], "--set", "max_steps=5", "--run-dir", "runs/x", "--set", "seed=3"]


def test_dry_run_multi_gpu_needs_a_server():
    result = dry_run("run_mt_grpo.sh", NUM_PROCESSES="7")
    assert result.returncode == 2 and "NUM_PROCESSES=7 needs SERVER=" in result.stderr
    command = command_of("run_mt_grpo.sh", NUM_PROCESSES="7", SERVER="http://gpu7:8000")
    assert command[:8] == ["accelerate", "launch", "--config_file",
                           str(REPO / "src/rlvr/trainer/accelerate/zero3.yaml"),
                           "--num_processes", "7", "-m", "rlvr.cli"]
    assert command[8:11] == ["train", "--config", GPU_CONFIG] and command[-2:] == ["--server", "http://gpu7:8000"]
    result = dry_run("run_mt_grpo.sh", DEVICE="tpu")
    assert result.returncode == 2 and "unknown device 'tpu'" in result.stderr


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_dry_run_commands_make_valid_configs(device, tmp_path):
    """What the launchers print is a config `rlvr train` accepts: the TOML plus the --set overrides."""
    command = command_of("run_mt_grpo.sh", device)
    data = read_config(Path(command[command.index("--config") + 1]))
    training = dict(data["training"])
    for item in (command[i + 1] for i, arg in enumerate(command) if arg == "--set"):
        apply_override(training, item, "mt_grpo")
    if not torch.cuda.is_available():
        training["bf16"] = False  # checked as a value in test_cli_configs; needs a GPU to build
    config = build_config(command[command.index("--algo") + 1], {"output_dir": str(tmp_path), **training})
    assert config.max_steps == (300 if device == "gpu" else 20)


def test_musique_analyze_wrapper_on_a_run(musique_scripts, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.0, "reward": 0.25}) + "\n")
    result = invoke(musique_scripts[1].app, "analyze", tmp_path)
    assert result.exit_code == 0, result
    assert_png(run / "reward_curve.png")
