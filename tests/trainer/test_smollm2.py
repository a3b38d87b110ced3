"""SmolLM2-135M: one MT-GRPO step on a real environment package (vf-gsm8k-code), end to end on CPU, with the
server `run_training` starts for the run (serving in the training dtype)."""

import json

import pytest
import vf_gsm8k_code

from rlvr.trainer import MTGRPOConfig, run_training


@pytest.mark.slow
def test_one_mt_grpo_step_with_smollm2_on_gsm8k_code(smol_model, tmp_path):
    env = vf_gsm8k_code.load_environment(num_train_examples=8, num_eval_examples=2, max_turns=2)
    config = MTGRPOConfig(
        output_dir=str(tmp_path), max_steps=1, save_steps=1, seed=0, learning_rate=1e-5,
        batch_size=4, rollouts_per_example=2, micro_batch_size=2, max_tokens_per_turn=32, max_seq_len=1024,
        use_lora=True, lora_rank=8, report_to="none", logging_steps=1, progress=False, verify_weight_sync=True,
        skip_zero_advantage=False,  # forward every sample, so that mismatch_kl exists however the rewards fall
    )
    # run_training starts the server (the shared smol_server must keep its weights): it serves float32, the
    # training dtype; vLLM's CPU default, bf16, would put the sampler ~0.06 nats from the trainer.
    run_training(env, "smollm2-135m", config)

    (record,) = [r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert record["batch/samples"] >= 4 and record["tokens/generated"] > 0
    assert record["turns"] >= 1 and "correct_answer_reward" in record
    assert record["train/mismatch_kl"] < 1e-3  # the served model is the trained model
    # fp32 on both sides; 30 layers accumulate more rounding than tiny-random's 2 (tolerance 1e-2 nats).
    assert record["sync/max_abs_logprob_diff"] < 1e-2
    assert (tmp_path / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert (tmp_path / "final" / "adapter_model.safetensors").is_file()
