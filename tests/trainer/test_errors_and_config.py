"""Clear errors (what, where, how to fix) and the outcome-only fallback for rubrics that are not turn-aware."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import verifiers as vf
from choice_env import answer_reward, load_environment
from datasets import Dataset
from train_script import config

from rlvr.trainer import ConfigError, MTGRPOConfig, MTGRPOTrainer, ResumeError, ServerError
from rlvr.trainer.checkpoint import RunState, check_resume
from rlvr.trainer.run import accelerate_config, launch_command, serving_dtype


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=12, rollouts_per_example=8), "not a multiple of rollouts_per_example=8"),
    (dict(batch_size=16, rollouts_per_example=8, micro_batch_size=5), r"micro_batch_size \* processes"),
    (dict(batch_size=16, rollouts_per_example=1), "at least 2"),
    (dict(loss_type="ppo"), "loss_type=.ppo. is not one of"),
    (dict(num_iterations=2, save_steps=3), "multiple of num_iterations=2"),
    (dict(weight_sync="nccl"), "needs CUDA"),
    (dict(algo="mtgrpo"), "algo='mtgrpo' is not a group-credit estimator"),
    (dict(algo="grpo", credit={"coef": 1.0}), r"credit parameter\(s\) \['coef'\] do not apply to algo='grpo'"),
    (dict(micro_batch_tokens=1), "micro_batch_tokens=1 must be >= 2"),
    (dict(logprob_chunk_tokens=0), "logprob_chunk_tokens=0 must be >= 1"),
    (dict(max_steps=3, num_iterations=2, save_steps=2), "max_steps=3 must be a multiple of num_iterations=2.*"
                                                        "max_steps=2"),
    # sampling the trainer's log-softmax cannot reproduce
    (dict(top_p=0.9), r"sampling settings \{'top_p': 0.9\}.*Train with top_p=1.0"),
    (dict(top_k=20), r"\{'top_k': 20\}"),
    (dict(min_p=0.05), r"\{'min_p': 0.05\}"),
    (dict(repetition_penalty=1.1, presence_penalty=0.5), r"\{'repetition_penalty': 1.1, 'presence_penalty': 0.5\}"),
    (dict(frequency_penalty=0.2), r"\{'frequency_penalty': 0.2\}"),
    (dict(temperature=0.0), "temperature=0.0.*greedy decoding"),
    # inherited settings the trainer does not implement
    (dict(use_liger=True), "use_liger=True: .*set use_liger=False"),
    (dict(mask_env_responses=False), "mask_env_responses=False: .*never trains on them"),
    (dict(warmup_steps=20), "warmup_steps=20 with lr_scheduler_type='constant', which ignores warmup.*"
                            "constant_with_warmup"),
    (dict(eval_strategy="steps"), "eval_strategy='steps': the trainer has no evaluation loop"),
])
def test_config_errors_say_what_to_change(tmp_path, kwargs, message):
    base = dict(output_dir=str(tmp_path), batch_size=16, rollouts_per_example=8, micro_batch_size=8,
                report_to="none")
    with pytest.raises(ConfigError, match=message):
        MTGRPOConfig(**{**base, **kwargs})


def test_neutral_sampling_settings_and_warmup_that_a_scheduler_uses_are_accepted(tmp_path):
    cfg = config(str(tmp_path), 2, top_k=-1, top_p=1.0, temperature=0.7, warmup_steps=1,
                 lr_scheduler_type="constant_with_warmup")
    assert cfg.get_warmup_steps(2) == 1


def test_lora_settings_that_rlconfig_drops_reach_the_adapter(tmp_path):
    # verifiers' RLConfig builds its LoraConfig from rank, alpha and target modules only.
    cfg = config(str(tmp_path), 1, lora=True, lora_dropout=0.1, lora_use_rslora=True,
                 lora_modules_to_save=["lm_head"])
    lora = cfg.lora_config
    assert (lora.r, lora.lora_dropout, lora.use_rslora, lora.modules_to_save) == (8, 0.1, True, ["lm_head"])


def test_a_resume_from_between_two_passes_over_a_batch_is_refused():
    state = RunState(global_step=3, next_batch_index=1, next_example_ids=[], seed=0, batch_size=16,
                     rollouts_per_example=8, num_iterations=2, dataset_size=16, dataset_fingerprint="f", config={})
    with pytest.raises(ResumeError, match="step 3: it lies between two of the 2 passes over batch 1"):
        check_resume(state, dataclasses.replace(state, global_step=0))
    check_resume(dataclasses.replace(state, global_step=4), dataclasses.replace(state, global_step=0))
    with pytest.raises(ResumeError, match="seed: checkpoint 0, this run 1"):
        check_resume(state, dataclasses.replace(state, seed=1))


def test_a_server_started_for_the_run_serves_the_training_dtype():
    assert serving_dtype(bf16=False) == "float32" and serving_dtype(bf16=True) == "bfloat16"
    assert serving_dtype(False, ["--dtype", "bfloat16"]) is None  # the user's choice stands


def test_several_cpu_processes_are_started_by_torchrun_since_accelerate_launch_would_start_one():
    cpu, gpu = accelerate_config(2, cuda=False), accelerate_config(2, cuda=True, bf16=True)
    command, env = launch_command(cpu, 2, ["-m", "rlvr.cli", "train"])
    assert command[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rlvr.cli",
                           "train"]
    assert env == {"ACCELERATE_USE_CPU": "true"}
    for config_file, processes in ((gpu, 8), (cpu, 1)):  # torchrun through accelerate, or one process
        command, env = launch_command(config_file, processes, ["script.py"])
        assert command[1:] == ["-m", "accelerate.commands.launch", "--config_file", str(config_file), "--num_processes",
                               str(processes), "script.py"] and env == {}


def test_the_accelerate_config_follows_the_device_and_the_training_dtype(tmp_path):
    assert accelerate_config(2, cuda=False).name == "cpu_ddp.yaml"
    assert accelerate_config(8, cuda=True, bf16=True).name == "zero2.yaml"
    with pytest.raises(ConfigError, match="sets use_cpu: true on a machine with GPUs"):
        accelerate_config(2, accelerate_config(2, cuda=False), cuda=True)
    with pytest.raises(ConfigError, match="mixed_precision: bf16 but the training config has bf16=False"):
        accelerate_config(8, cuda=True, bf16=False)
    with pytest.raises(ConfigError, match="is a GPU config .* no CUDA"):
        accelerate_config(2, accelerate_config(2, cuda=True), cuda=False)
    with pytest.raises(ConfigError, match="does not exist"):
        accelerate_config(2, tmp_path / "missing.yaml")
    own = tmp_path / "mine.yaml"
    own.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nmixed_precision: bf16\n"
                   "num_processes: 4\n")
    assert accelerate_config(4, own, cuda=True, bf16=True) == own  # the user's file is taken as it is


def test_truncated_rollouts_leave_the_loss_when_asked():
    from test_batching import rollout, turn

    from rlvr.trainer.batching import rollout_samples, trained_samples
    from rlvr.trainer.on_policy import zero_truncated_outcome

    done = rollout([turn([1, 2], [3])], [1.0])
    cut = dataclasses.replace(rollout([turn([1, 2], [4, 5])], [1.0]), truncated=True, outcome=1.0)
    samples = [rollout_samples(r) for r in (done, cut)]
    assert len(trained_samples([done, cut], samples)) == 2
    assert [s.input_ids for s in trained_samples([done, cut], samples, mask_truncated=True)] == [[1, 2, 3]]
    assert zero_truncated_outcome(cut).outcome == 0.0 and zero_truncated_outcome(done) is done


def test_config_maps_max_tokens_per_turn_into_sampling_args(tmp_path):
    cfg = config(str(tmp_path), 1, max_tokens_per_turn=7)
    assert cfg.sampling_args["max_tokens"] == 7
    assert cfg.sampling_args["extra_body"]["return_token_ids"] is True


def test_unreachable_server_prints_the_command_that_starts_one(tmp_path, tiny_model):
    with pytest.raises(ServerError, match=r"(?s)unreachable.*rlvr serve --model tiny-random --port 9"):
        MTGRPOTrainer("tiny-random", load_environment(), config(str(tmp_path), 1),
                      server_url="http://127.0.0.1:9")


def plain_env() -> vf.Environment:
    """A plain verifiers environment: one turn, a vf.Rubric that scores only the whole rollout."""
    dataset = Dataset.from_list([{"question": f"Say a word ({i}).", "answer": ""} for i in range(4)])
    return vf.SingleTurnEnv(dataset=dataset, rubric=vf.Rubric(funcs=[answer_reward]))


def test_a_turn_level_algorithm_on_a_plain_rubric_says_what_is_missing(tmp_path):
    with pytest.raises(ConfigError, match=r"(?s)algo='mt_grpo' assigns credit per turn.*gives no turn rewards.*"
                                          r"algo='grpo'.*TurnRubric\(turn_rewards="):
        MTGRPOTrainer.preflight(plain_env(), config(str(tmp_path), 1, algo="mt_grpo"))


def test_credit_settings_merge_with_the_environments_defaults(tmp_path):
    from rlvr.trainer.mt_grpo import credit_params

    env = load_environment(credit={"unreached": "zero", "coef": 2.0})
    assert credit_params(env, config(str(tmp_path), 1, algo="mt_grpo_k", credit={"alpha": 0.5})) == \
        {"unreached": "zero", "alpha": 0.5}  # the environment's coef is not mt_grpo_k's, its unreached is kept
    assert credit_params(env, config(str(tmp_path), 1, algo="mt_grpo")) == {"coef": 2.0}
    with pytest.raises(ConfigError, match="sets 1.0 but the environment's TurnRubric declares 2.0"):
        credit_params(env, config(str(tmp_path), 1, algo="mt_grpo", credit={"coef": 1.0}))


def test_wandb_without_a_key_runs_offline(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = config(str(tmp_path), 1, report_to="wandb")
    assert cfg.report_to == ["wandb"]
    assert os.environ["WANDB_MODE"] == "offline"  # transformers' WandbCallback then logs locally


def test_the_paper_gpu_config_warms_up_and_clips_like_the_paper(tmp_path):
    """MT-GRPO's training arguments (SiliangZeng/Multi-Turn-RL-Agent, verifiers/utils/config_utils.py):
    constant_with_warmup over 20 steps to lr 1e-6, AdamW betas 0.9/0.99, gradient norm clipped at 0.1."""
    import torch
    from transformers import get_scheduler

    from rlvr.cli.train import read_config
    from rlvr.trainer import build_config

    data = read_config(Path(__file__).resolve().parents[2] / "configs" / "train" / "triviaqa_mt_grpo_gpu.toml")
    training = {**data["training"], "bf16": torch.cuda.is_available()}  # bf16 needs CUDA (or use_cpu) to build
    cfg = build_config(data["algo"], {"output_dir": str(tmp_path), **training})
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.max_grad_norm, cfg.credit) == (0.9, 0.99, 0.1, {"coef": 1.0})
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=cfg.learning_rate)
    schedule = get_scheduler(cfg.lr_scheduler_type, optimizer, num_warmup_steps=cfg.get_warmup_steps(cfg.max_steps),
                             num_training_steps=cfg.max_steps)
    rates = []
    for _ in range(25):
        rates.append(schedule.get_last_lr()[0])
        optimizer.step()
        schedule.step()
    assert rates[0] == 0.0 and rates[10] == pytest.approx(0.5e-6) and rates[20:] == [1e-6] * 5
