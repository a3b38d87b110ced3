"""MT-GRPO end to end on CPU against a real `rlvr serve` of tiny-random (our own server: training changes it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from statistics import mean

import pytest
from choice_env import load_environment
from learning_check import StopOnceLearned, assert_learned
from train_script import config

from rlvr.trainer import run_training
from rlvr.trainer.run import launch_command

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parent / "train_script.py"
# fp32 server and fp32 trainer: the same weights give the same logprobs up to float32 rounding in two different
# kernels (vLLM's CPU attention and GEMMs vs. torch), measured ~1e-6 nats on this 2-layer model before training;
# 1e-3 leaves room for logits that grow during training. A missed or partial sync shows up as several nats.
SYNC_TOLERANCE = 1e-3


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def step_records(run_dir: Path) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if "loss" in r]


@pytest.mark.slow
def test_mt_grpo_raises_the_turn_reward_and_the_server_follows_every_sync(training_server, tmp_path):
    # lr 5e-2: a random-weight policy is near-uniform over 49k tokens; only a large step concentrates mass on
    # the rewarded first tokens within a test's budget. Measured at 32 rollouts x 20 steps: turn-0 reward 1.0
    # by steps 5-9 in 8 of 8 runs. The run stops once it has learned (learning_check), within 20 steps.
    cfg = config(str(tmp_path), 20, learning_rate=5e-2, verify_weight_sync=True, batch_size=32)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url,
                 callbacks=[StopOnceLearned()])

    records = step_records(tmp_path)
    steps = len(records)
    assert [r["step"] for r in records] == list(range(1, steps + 1))
    assert_learned([r["turn/1/reward"] for r in records])
    forwarded = [r for r in records if r["batch/skipped_zero_advantage_fraction"] < 1.0]
    assert forwarded  # a batch whose groups all won (or all lost) alike forwards nothing (skip_zero_advantage)
    for r in records:
        assert r["sync/max_abs_logprob_diff"] < SYNC_TOLERANCE, r
        # sampler and trainer agree on every forwarded token (k3, nats); a batch that forwarded none has no value
        assert r["train/mismatch_kl"] < 1e-6 if r in forwarded else "train/mismatch_kl" not in r
    # The same check against the server's previous weights fails by orders of magnitude: it can tell.
    assert all(r["sync/max_abs_logprob_diff_before"] > 100 * SYNC_TOLERANCE for r in records[1:])
    assert all(0.0 <= r["batch/packed_fraction"] <= 1.0 for r in records)
    assert mean(r["batch/packed_fraction"] for r in records) > 0.5  # most histories are prefix-consistent
    assert all(r["batch/forwarded_over_trajectory_tokens"] >= 1.0 for r in records)
    for key in ("timing/generation_s", "timing/scoring_s", "timing/training_s", "timing/sync_s", "time/step_s",
                "turn/1/advantage_std", "tool_result_fraction", "turns", "choice_reward", "turn_reward",
                "reward_errors"):
        assert key in records[0], key
    assert (tmp_path / "final" / "model.safetensors").is_file()
    assert json.loads((tmp_path / "config.json").read_text())["training"]["learning_rate"] == 5e-2
    rollouts = read_jsonl(tmp_path / "rollouts.jsonl")
    assert [r["batch_index"] for r in rollouts] == list(range(steps))
    assert len(rollouts[0]["example_ids"]) == 32 and rollouts[0]["rollouts"][0]["completion"]


def wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"training exited with {proc.returncode} before {what}")
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def sigkill_while_step_3_trains(script: Path, server_url: str, run: Path, *args: str) -> Path:
    """Train with `script` (checkpoints every 2 steps) and SIGKILL it once batch 2 is generated: checkpoint-2 is
    written and step 3 is training. Returns the run's rollouts.jsonl."""
    command = [sys.executable, str(script), "--server", server_url, "--run-dir", str(run), "--steps", "50",
               "--save-steps", "2", *args]
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rollouts = run / "rollouts.jsonl"
    try:
        wait_for(lambda: rollouts.exists() and any(r["batch_index"] == 2 for r in read_jsonl(rollouts)),
                 600, "batch 2", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rollouts


@pytest.mark.slow
def test_sigkill_mid_training_then_resume_takes_the_same_next_batch(training_server, tmp_path):
    run = tmp_path / "run"
    rollouts = sigkill_while_step_3_trains(SCRIPT, training_server.url, run, "--lora")
    checkpoint = run / "checkpoint-2"
    for name in ("adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                 "trainer_state.json", "rlvr_state.json"):
        assert (checkpoint / name).is_file(), name
    saved = json.loads((checkpoint / "rlvr_state.json").read_text())
    killed_batch = next(r for r in read_jsonl(rollouts) if r["batch_index"] == 2)
    assert saved["next_batch_index"] == 2 and sorted(set(saved["next_example_ids"])) == sorted(
        set(killed_batch["example_ids"]))

    cfg = config(str(run), 3, save_steps=2, lora=True, micro_batch_size=4)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url, resume=True)

    # rollouts.jsonl was cut back to the checkpoint: batch 2 appears once, from the resumed run
    assert [r["batch_index"] for r in read_jsonl(rollouts)] == [0, 1, 2]
    resumed_batch = [r for r in read_jsonl(rollouts) if r["batch_index"] == 2][-1]
    assert resumed_batch["step"] == 2  # continued at global step 2, not from scratch
    assert resumed_batch["example_ids"] == killed_batch["example_ids"]  # the same prompts, in the same order
    assert [r["step"] for r in step_records(run)] == [1, 2, 3]  # the killed step's partial log was dropped
    assert not list(run.glob(".staging-*"))


@pytest.mark.slow
def test_two_process_cpu_accelerate_launch(training_server, tmp_path):
    """Two ranks, the main one generating one batch ahead (async_steps = 1) and broadcasting each batch; started
    as `rlvr train --num-processes 2` starts them (launch_command: torchrun on CPU)."""
    command, launch_env = launch_command(REPO / "src" / "rlvr" / "trainer" / "accelerate" / "cpu_ddp.yaml", 2, [
        str(SCRIPT), "--server", training_server.url, "--run-dir", str(tmp_path), "--steps", "2", "--save-steps", "2",
        "--async-steps", "1"])
    env = {**os.environ, **launch_env, "OMP_NUM_THREADS": "1"}  # two ranks on two cores
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    # two ranks trained: each saved its RNG state (transformers names them by process index only when there are more)
    assert sorted(p.name for p in (tmp_path / "checkpoint-2").glob("rng_state*")) == ["rng_state_0.pth",
                                                                                       "rng_state_1.pth"]
    records = step_records(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["batch/samples"] >= 16 for r in records)
    assert [r["async/staleness_max"] for r in records][0] == 0 and records[1]["async/staleness_max"] <= 1
    assert (tmp_path / "final" / "model.safetensors").is_file()
    # token_credit.jsonl (2 groups of 8 per batch): the trainer's logprobs of logged samples that the other rank
    # trained are gathered to the main process; batch 0's tokens come from the weights being trained
    logged = read_jsonl(tmp_path / "token_credit.jsonl")
    assert len(logged) == 2 * 2 * 8
    trained = [(s["logprob"][t], s["behavior_logprob"][t]) for r in logged if r["batch_index"] == 0
               for s in r["samples"]
               for t in range(len(s["trained"])) if s["trained"][t]]
    assert trained and all(lp is not None and abs(lp - blp) < SYNC_TOLERANCE for lp, blp in trained)


@pytest.mark.slow
@pytest.mark.parametrize("lora, loss_type", [(True, "ppo_clip"), (False, "masked_is")])
def test_kl_to_the_reference_and_two_iterations_per_batch(training_server, tmp_path, lora, loss_type):
    # The reference: the adapter-disabled model under LoRA, a frozen copy of the initial weights otherwise.
    cfg = config(str(tmp_path), 2, lora=lora, loss_type=loss_type, beta=0.1, num_iterations=2, save_steps=2)
    run_training(load_environment(), "tiny-random", cfg, server_url=training_server.url)
    first, second = step_records(tmp_path)
    assert first["iteration"] == 0 and second["iteration"] == 1
    assert first["train/kl"] == pytest.approx(0.0, abs=1e-9)  # policy == reference before any update
    assert second["train/kl"] > 0.0  # one optimizer step later they differ
    assert "timing/generation_s" in first and "timing/generation_s" not in second  # one batch, two passes
    assert len(read_jsonl(tmp_path / "rollouts.jsonl")) == 1


@pytest.mark.slow
def test_an_env_group_of_turn_level_environments_gets_turn_level_credit(training_server, tmp_path):
    # EnvGroup scores through an EnvGroupRubric that routes each rollout to its environment's rubric; the TurnRubrics
    # sit in its env_map. Outcome-only GRPO would give both turns of a rollout the same advantage.
    import verifiers as vf

    from rlvr.rollouts import group_by_example
    from rlvr.trainer import MTGRPOTrainer

    group = vf.EnvGroup(envs=[load_environment(num_examples=3), load_environment(num_examples=3)],
                        env_names=["first", "second"])
    trainer = MTGRPOTrainer("tiny-random", group, config(str(tmp_path), 1), server_url=training_server.url)
    generated = trainer.rollouts.generate(group, trainer.dataset, 8)
    rollouts, _ = trainer.make_samples(generated.rollouts)
    assert {r.task for r in rollouts} == {"first", "second"} and all(r.turn_level for r in rollouts)
    varied = 0
    for rollout_group in group_by_example(rollouts):
        turn_rewards = [r.turn_reward for r in rollout_group]
        if len(set(turn_rewards)) == 1:
            continue
        varied += 1
        center = mean(turn_rewards)
        for r, reward in zip(rollout_group, turn_rewards, strict=True):
            # MT-GRPO (rlvr.credit.mt_grpo): turn 0 (which got the tool result) carries A_out + coef * A_turn,
            # turn 1 A_out alone, so their difference has the sign of the rollout's turn reward minus the group's.
            assert r.first_result_turn == 0 and len(r.advantages) == 2
            assert (r.advantages[0] - r.advantages[1] > 0) == (reward > center), (r.advantages, turn_rewards)
    assert varied >= 2  # a random policy picks a good letter about half the time: groups of 8 vary


@pytest.mark.slow
def test_filter_groups_fills_a_batch_with_groups_whose_outcomes_differ(training_server, tmp_path):
    """DAPO's dynamic sampling against the real server: with 2 rollouts a prompt most of the random policy's groups
    agree (both lose), so the batch needs further rounds of new prompts; every group it trains on has outcome spread,
    the batch's own prompts come first, and the same batch index rolls out the same batch again (a resumed run)."""
    from rlvr.rollouts import group_by_example
    from rlvr.trainer import MTGRPOTrainer
    from rlvr.trainer.group_filter import advantage_spread

    env = load_environment(num_examples=32)
    cfg = config(str(tmp_path), 1, batch_size=8, rollouts_per_example=2, micro_batch_size=2, filter_groups=True,
                 max_generation_rounds=6)
    trainer = MTGRPOTrainer("tiny-random", env, cfg, server_url=training_server.url)
    trainer.sync_weights()  # the initial policy, whatever an earlier test left on the shared server
    generated = trainer.generate_batch(0)
    groups = group_by_example(generated.rollouts)
    assert len(groups) == trainer.prompts_per_batch == 4
    assert all(len(g) == 2 and len({r.outcome for r in g}) == 2 for g in groups)
    assert generated.generation_rounds >= 2 and generated.dropped_groups >= 1
    outcome_dropped = generated.dropped_groups
    own = trainer.rollouts.generate(env, trainer.batch_example_rows(0), 2, batch=0)
    with_spread = [g[0].example_id for g in group_by_example(own.rollouts) if len({r.outcome for r in g}) == 2]
    assert [g[0].example_id for g in groups][:len(with_spread)] == with_spread
    again = trainer.generate_batch(0)
    assert [(r.example_id, r.completion) for r in again.rollouts] == [
        (r.example_id, r.completion) for r in generated.rollouts]
    metrics = trainer.make_batch(0, generated).metrics
    assert metrics["batch/generation_rounds"] == generated.generation_rounds
    assert metrics["batch/dropped_groups"] == generated.dropped_groups
    assert metrics["batch/skipped_zero_advantage_fraction"] == 0.0  # every rollout carries an outcome advantage
    trainer.close()

    # by advantage: MT-GRPO's credit keeps groups whose rollouts lost alike but chose differently (turn rewards)
    cfg = config(str(tmp_path / "by_advantage"), 1, batch_size=8, rollouts_per_example=2, micro_batch_size=2,
                 filter_groups=True, filter_groups_by="advantage", max_generation_rounds=6)
    trainer = MTGRPOTrainer("tiny-random", env, cfg, server_url=training_server.url)
    generated = trainer.generate_batch(0)
    groups = group_by_example(generated.rollouts)
    assert len(groups) == 4 and all(advantage_spread(trainer.assign_credit(g)) for g in groups)
    kept_for_turns = [g for g in groups if len({r.outcome for r in g}) == 1]
    assert kept_for_turns and all(len({r.turn_rewards[0] for r in g}) == 2 for g in kept_for_turns)
    assert generated.dropped_groups < outcome_dropped  # fewer groups are dropped than by the outcome
    trainer.close()
