"""MTGRPOTrainer: verifiers' RLTrainer with turn-level advantages, packed trajectories, CPU weight sync, resume.

One optimizer step, top to bottom (`training_step`, then transformers' loop does clip + optimizer + scheduler):

    every num_iterations steps:   sync weights to the server (if they changed)  ->  generate a batch of groups
                                  ->  score each group (TurnRubric writes step["advantage"])  ->  pack samples
    every step:                   per-token loss over the batch's micro-batches (PPO clip or masked IS, + KL)

Generation is synchronous (on-policy): on a 2-core CPU, overlapping vLLM and training would only split the same
cores, and on-policy batches make `num_iterations`' "old policy" the sampling policy exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import logging
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import torch
import verifiers as vf
from accelerate.utils import broadcast_object_list
from openai import AsyncOpenAI
from peft import PeftConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, Trainer
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import rotate_checkpoints
from verifiers.rl.inference.client import VLLMClient
from verifiers.rl.trainer import RLTrainer
from verifiers.rl.trainer.utils import (
    entropy_from_logits,
    finalize_stat_tracker,
    init_stat_tracker,
    pad,
    prepare_peft_model,
    selective_log_softmax,
    summarize_values,
    update_stat_tracker,
)
from verifiers.utils.message_utils import messages_to_printable

from rlvr.credit import compute_advantages
from rlvr.credit.estimators import ESTIMATOR_FUNCS
from rlvr.io import append_jsonl, atomic_write_json
from rlvr.rubrics import TurnRubric
from rlvr.serve import CPUWeightSyncClient
from rlvr.trainer.batching import RolloutSamples, Sample, distribute, rollout_samples
from rlvr.trainer.config import MTGRPOConfig
from rlvr.trainer.loss import policy_loss
from rlvr.trainer.metrics import JsonlMetricsCallback, RichProgressCallback, rollout_metrics
from rlvr.trainer.sync import (
    check_server,
    check_token_ids,
    missing_token_ids_error,
    policy_state_dict,
    server_prompt_logprobs,
)

logger = logging.getLogger(__name__)

RLVR_STATE = "rlvr_state.json"


@dataclass
class TrainBatch:
    """What every process needs from one generated batch (picklable: it is broadcast from the main process)."""

    batch_index: int
    microbatches: list[list[list[Sample]]]  # [process][micro-batch][sample]
    loss_tokens: int  # trained tokens over all processes (the loss normaliser)
    metrics: dict[str, float] = field(default_factory=dict)


def _estimator_params(estimator: str, args: MTGRPOConfig) -> dict[str, Any]:
    """Map the config's generic names onto the chosen rlvr.credit estimator's own parameter names."""
    accepted = inspect.signature(ESTIMATOR_FUNCS[estimator]).parameters
    params: dict[str, Any] = {"norm": args.normalize}
    if "coef" in accepted:
        params["coef"] = args.turn_advantage_coef
    for name in ("gamma", "alpha"):  # ms_po/turn_return discount, mt_grpo_k decay
        if name in accepted:
            params[name] = args.discount_factor
    return params


def find_turn_rubrics(rubric: vf.Rubric) -> list[TurnRubric]:
    if isinstance(rubric, TurnRubric):
        return [rubric]
    return [t for r in getattr(rubric, "rubrics", []) for t in find_turn_rubrics(r)]


def load_policy(model: str | PreTrainedModel, args: MTGRPOConfig, tokenizer=None):
    """The trainable model and its tokenizer; a registered name ("tiny-random") resolves through rlvr.models."""
    if isinstance(model, PreTrainedModel):
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(model.config._name_or_path)
        return model, tokenizer
    from rlvr.models import resolve

    path = resolve(model)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    # sdpa, not verifiers' flash_attention_2 default: it runs on CPU and GPU alike.
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    return policy, tokenizer or AutoTokenizer.from_pretrained(path)


class MTGRPOTrainer(RLTrainer):
    def __init__(
        self,
        model: str | PreTrainedModel,
        env: vf.Environment,
        args: MTGRPOConfig,
        processing_class=None,
        server_url: str | None = None,
        callbacks: list | None = None,
    ):
        self.logger = logger
        model_name = model if isinstance(model, str) else model.config._name_or_path
        model, processing_class = load_policy(model, args, processing_class)
        self.ref_model = None
        if args.beta > 0 and not args.use_lora:
            # Full fine-tuning: the reference is a frozen copy of the initial policy (GRPO, DeepSeekMath Sec. 4.1).
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        if args.use_lora and isinstance(args.lora_config, PeftConfig):
            model = prepare_peft_model(model, args.lora_config, args)
        callbacks = list(callbacks or []) + [JsonlMetricsCallback(Path(args.output_dir) / "metrics.jsonl")]
        # RLTrainer.__init__ opens verifiers' NCCL communicator and starts its asynchronous generation thread
        # unconditionally; we need the CPU transport and on-policy batches, so we did its model preparation
        # above and initialise transformers' Trainer directly. Everything else of RLTrainer is inherited.
        Trainer.__init__(self, model=model, args=args, processing_class=processing_class, callbacks=callbacks)
        if args.progress:
            self.remove_callback(ProgressCallback)
            self.add_callback(RichProgressCallback())
        tokenizer = self.processing_class
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

        if self.ref_model is not None:
            self.ref_model.to(self.args.device)
        # Attributes that RLTrainer's inherited methods read (get_train_dataloader, update_vllm, log_metrics).
        self.max_steps = args.max_steps
        self.orchestrator = None
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

        self.env = env
        self.run_dir = Path(args.output_dir)
        self.sync_mode = args.weight_sync if args.weight_sync != "auto" else (
            "nccl" if torch.cuda.is_available() else "cpu")
        self.turn_rubrics = find_turn_rubrics(env.rubric)
        if args.advantage_estimator is not None:
            for rubric in self.turn_rubrics:
                rubric.estimator = args.advantage_estimator
                rubric.estimator_params = _estimator_params(args.advantage_estimator, args)
        if not self.turn_rubrics:
            logger.warning("the environment's rubric is not turn-aware (no TurnRubric): training outcome-only GRPO")
        # Scoring is timed apart from generation: the trainer scores each group itself after generation.
        env.set_score_rollouts(False)
        dataset = env.get_dataset()
        if len(dataset) == 0:
            raise ValueError("the environment's training dataset is empty: check load_environment's arguments")
        self.dataset = dataset.shuffle(seed=args.seed) if args.shuffle_dataset else dataset
        self.prompts_per_batch = args.batch_size // args.rollouts_per_example

        self._batch: TrainBatch | None = None
        self._synced_at_step: int | None = None
        self._pending: dict[str, float] = {}  # timings of this step's generation and sync
        self._last_log_time = time.perf_counter()
        self.client = None
        self.server_url = None
        if self.accelerator.is_main_process:
            if server_url is None:
                server_url = f"http://{args.vllm_server_host}:{args.vllm_server_port}"
            self.server_url = server_url.rstrip("/").removesuffix("/v1")
            self.served_model = check_server(self.server_url, model_name, tokenizer)
            check_token_ids(self.server_url, self.served_model, args.sampling_args)
            self._loop = asyncio.new_event_loop()
            self._openai = AsyncOpenAI(
                base_url=f"{self.server_url}/v1", api_key="EMPTY",
                http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=args.max_concurrent),
                                              timeout=args.generation_timeout),
            )
            if self.sync_mode == "cpu":
                self.cpu_sync = CPUWeightSyncClient(self.server_url)
            else:
                host, port = self.server_url.removeprefix("http://").rsplit(":", 1)
                self.client = VLLMClient(host=host, port=int(port), connection_timeout=args.vllm_server_timeout)
                self.client.init_communicator()

    # ---------------------------------------------------------------- data
    def batch_example_rows(self, batch_index: int):
        """The prompts of batch `batch_index`: consecutive rows of the seeded shuffle, wrapping around.

        A pure function of the index, so a resumed run (global_step restored) takes the same next batch.
        """
        n = len(self.dataset)
        start = batch_index * self.prompts_per_batch
        return self.dataset.select([(start + i) % n for i in range(self.prompts_per_batch)])

    # ---------------------------------------------------------------- generation (main process)
    def generate_batch(self, batch_index: int) -> TrainBatch:
        """Roll out batch `batch_index` on the server, score it group by group, and split it into samples."""
        args = self.args
        rows = self.batch_example_rows(batch_index)
        start = time.perf_counter()
        outputs = self._loop.run_until_complete(self.env.generate(
            rows.repeat(args.rollouts_per_example), client=self._openai, model=self.served_model,
            sampling_args=dict(args.sampling_args), max_concurrent=args.max_concurrent, use_tqdm=False,
        ))
        states = outputs["state"]
        generation_s = time.perf_counter() - start

        start = time.perf_counter()
        groups: dict[Any, list] = defaultdict(list)
        for state in states:
            groups[state["example_id"]].append(state)
        self._loop.run_until_complete(self.score_groups(list(groups.values())))
        scoring_s = time.perf_counter() - start

        rollouts = [rollout_samples(s["trajectory"], pack=args.pack_trajectories) for s in states]
        samples = [sample for r in rollouts for sample in r.samples]
        if not samples:
            if any(s["trajectory"] for s in states):
                raise missing_token_ids_error(self.server_url)
            errors = [repr(s.get("error")) for s in states if s.get("error") is not None][:3]
            raise RuntimeError(f"batch {batch_index}: no rollout produced an assistant turn; errors: {errors}")
        micro = distribute(samples, self.accelerator.num_processes, args.micro_batch_size,
                           self.processing_class.pad_token_id)
        metrics = rollout_metrics(states, rollouts)
        metrics.update({
            "timing/generation_s": generation_s, "timing/scoring_s": scoring_s,
            "tokens/generation_per_s": metrics["tokens/generated"] / max(generation_s, 1e-9),
        })
        self._log_rollouts(batch_index, states, rollouts)
        return TrainBatch(batch_index, micro, sum(sum(s.loss_mask) for s in samples), metrics)

    async def score_groups(self, groups: list[list]) -> None:
        """Rewards and step["advantage"] for each group of rollouts of one prompt, in place."""
        rubric = self.env.rubric
        await asyncio.gather(*(rubric.score_group(g, score_sem=contextlib.nullcontext()) for g in groups))
        if self.turn_rubrics:
            return
        # Not turn-aware: outcome-only GRPO with std normalisation (rlvr.credit "grpo"), replacing verifiers'
        # mean-only default (Rubric.score_group subtracts the group mean without dividing by the std).
        for group in groups:
            advantages = compute_advantages(
                "grpo", [[0.0] * len(s["trajectory"]) for s in group], [float(s["reward"] or 0.0) for s in group],
                [None] * len(group), norm=self.args.normalize,
            )
            for state, adv in zip(group, advantages, strict=True):
                for step, a in zip(state["trajectory"], adv, strict=True):
                    step["advantage"] = a
                state["advantage"] = adv[-1] if adv else 0.0

    def _log_rollouts(self, batch_index: int, states: list, rollouts: list[RolloutSamples]) -> None:
        """One line per generated batch in rollouts.jsonl: the batch's example ids and a few full rollouts."""
        shown = []
        for state, r in list(zip(states, rollouts, strict=True))[: self.args.num_logged_rollouts]:
            shown.append({
                "example_id": state["example_id"], "reward": state.get("reward"),
                "prompt": messages_to_printable(state["prompt"]),
                "completion": messages_to_printable(state.get("completion") or []),
                "turn_rewards": [step.get("reward") for step in state["trajectory"]],
                "turn_advantages": [step.get("advantage") for step in state["trajectory"]],
                "packed": r.packed, "not_packed_because": r.reason, "error": repr(state.get("error") or ""),
            })
        append_jsonl(self.run_dir / "rollouts.jsonl", {
            "step": self.state.global_step, "batch_index": batch_index,
            "example_ids": [s["example_id"] for s in states], "rollouts": shown,
        })

    # ---------------------------------------------------------------- weight sync
    def sync_weights(self) -> None:
        """Send the current policy to the server (all processes call it); logs seconds and, if asked, the check."""
        verify = self.args.verify_weight_sync and self.accelerator.is_main_process
        if verify and self._synced_at_step is not None:
            # The same check against the server's previous weights: shows the check can tell them apart.
            self._pending["sync/max_abs_logprob_diff_before"] = self.weight_sync_error()
        start = time.perf_counter()
        if self.sync_mode == "nccl":
            RLTrainer.update_vllm(self)  # verifiers' NCCL protocol, unchanged
        else:
            if self.accelerator.is_main_process:
                self.cpu_sync.update_weights(policy_state_dict(self.accelerator.unwrap_model(self.model)))
            self.accelerator.wait_for_everyone()
        self._synced_at_step = self.state.global_step
        self._pending["timing/sync_s"] = time.perf_counter() - start
        if verify:
            self._pending["sync/max_abs_logprob_diff"] = self.weight_sync_error()

    def weight_sync_error(self) -> float:
        """Max |server logprob - trainer logprob| over the first prompt's tokens, at temperature 1."""
        input_ids = list(self.processing_class.apply_chat_template(
            self.dataset[0]["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False))
        served = torch.tensor(server_prompt_logprobs(self.server_url, self.served_model, input_ids))
        model = self.accelerator.unwrap_model(self.model)
        with torch.no_grad():
            ids = torch.tensor([input_ids], device=self.accelerator.device)
            logits = model(input_ids=ids).logits[0, :-1].float()
            ours = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0].cpu()
        return float((served - ours).abs().max())

    # ---------------------------------------------------------------- one optimizer step
    def training_step(self, model, inputs=None, num_items_in_batch=None) -> torch.Tensor:
        args = self.args
        step = self.state.global_step
        iteration = step % args.num_iterations
        if iteration == 0 or self._batch is None:
            if self._synced_at_step != step:
                self.sync_weights()
            batch = [self.generate_batch(step // args.num_iterations) if self.accelerator.is_main_process else None]
            broadcast_object_list(batch, from_process=0)
            self._batch = batch[0]
        batch = self._batch

        model.train()
        device = self.accelerator.device
        start = time.perf_counter()
        # Token-level normalisation over the whole batch (verifiers RLTrainer; DAPO, arXiv 2503.14476, Eq. 8):
        # DDP averages gradients over ranks, so each rank divides by (all trained tokens / ranks).
        inv_tokens = torch.tensor(self.accelerator.num_processes / max(batch.loss_tokens, 1), device=device)
        trackers = {k: init_stat_tracker(device) for k in ("ratio", "clipped", "entropy", "kl", "mismatch_kl")}
        total_loss = torch.zeros((), device=device)
        forwarded = 0
        for micro in batch.microbatches[self.accelerator.process_index]:
            lengths = torch.tensor([len(s) for s in micro], device=device)
            input_ids = pad([torch.tensor(s.input_ids, device=device) for s in micro],
                            padding_value=self.processing_class.pad_token_id)
            # From lengths, not input_ids != pad: the pad token (<|im_end|>) also ends every turn.
            attention_mask = (torch.arange(input_ids.size(1), device=device)[None] < lengths[:, None]).long()
            # Position p predicts token p + 1: only positions whose next token is trained need logits.
            trained = pad([torch.tensor(s.loss_mask, device=device) for s in micro])[:, 1:].bool()
            keep = trained.any(0).nonzero().squeeze(-1)
            if keep.numel() == 0:  # a filler micro-batch still runs forward/backward (DDP all-reduces)
                keep = torch.zeros(1, dtype=torch.long, device=device)
            loss_mask = trained[:, keep]
            behavior = pad([torch.tensor(s.behavior_logprobs, device=device) for s in micro])[:, 1:][:, keep]
            advantages = pad([torch.tensor(s.advantages, device=device) for s in micro])[:, 1:][:, keep]
            forwarded += int(lengths.sum())

            logprobs, entropies = self.token_logprobs(model, input_ids, attention_mask, keep)
            ref_logprobs = self._reference_logprobs(model, input_ids, attention_mask, keep) if args.beta > 0 else None
            terms = policy_loss(
                logprobs, behavior, advantages, loss_type=args.loss_type,
                epsilon_low=args.epsilon_low, epsilon_high=args.epsilon_high,
                mask_ratio_low=args.mask_ratio_low, mask_ratio_high=args.mask_ratio_high,
                ref_logprobs=ref_logprobs, beta=args.beta,
            )
            loss = (terms.loss * loss_mask).sum() * inv_tokens
            self.accelerator.backward(loss)
            total_loss = total_loss + loss.detach()

            with torch.no_grad():
                update_stat_tracker(trackers["ratio"], summarize_values(terms.ratio[loss_mask]))
                update_stat_tracker(trackers["clipped"], summarize_values(terms.is_clipped[loss_mask].float()))
                update_stat_tracker(trackers["entropy"], summarize_values(entropies[loss_mask]))
                if terms.kl is not None:
                    update_stat_tracker(trackers["kl"], summarize_values(terms.kl[loss_mask]))
                if iteration == 0:
                    # Sampler-vs-trainer mismatch on freshly synced weights (verifiers' "mismatch_kl", k3 form):
                    # near 0 when the sync and both forward passes agree.
                    log_r = logprobs - behavior
                    update_stat_tracker(trackers["mismatch_kl"],
                                        summarize_values((torch.exp(log_r) - log_r - 1)[loss_mask]))
        training_s = time.perf_counter() - start

        train_metrics = {f"train/{k}": finalize_stat_tracker(t, self.accelerator) for k, t in trackers.items()}
        if self.accelerator.is_main_process:
            step_metrics = {**(batch.metrics if iteration == 0 else {}), **self._pending,
                            **{k: v for k, v in train_metrics.items() if v is not None},
                            "timing/training_s": training_s, "tokens/training_per_s": forwarded / training_s,
                            "iteration": float(iteration)}
            self.log_metrics("train", step_metrics)  # RLTrainer: buffered until Trainer.log averages them
        self._pending = {}
        return total_loss

    def token_logprobs(self, model, input_ids, attention_mask, keep) -> tuple[torch.Tensor, torch.Tensor]:
        """Logprobs (at the sampling temperature, as verifiers' RLTrainer.get_logprobs) and entropies of the
        tokens after positions `keep`. The LM head runs on those positions only (`logits_to_keep`): with a
        50k-token vocabulary it costs more than the whole small model, and prompt/env positions need none."""
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
        logits = logits / self.args.temperature
        targets = input_ids[:, keep + 1]
        return selective_log_softmax(logits, targets), entropy_from_logits(logits.detach())

    def _reference_logprobs(self, model, input_ids, attention_mask, keep) -> torch.Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return self.token_logprobs(self.ref_model, input_ids, attention_mask, keep)[0]
            # LoRA: the reference is the base model, i.e. the policy with its adapter switched off.
            with self.accelerator.unwrap_model(model).disable_adapter():
                return self.token_logprobs(model, input_ids, attention_mask, keep)[0]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Average the buffered step metrics into the log record (RLTrainer.log without its console dump)."""
        metrics = {k: sum(v) / len(v) for k, v in self._metrics["train"].items()}
        self._metrics["train"].clear()
        now = time.perf_counter()
        if "loss" in logs:  # a training-step log (not the end-of-training summary)
            metrics["time/step_s"] = (now - self._last_log_time) / max(self.args.logging_steps, 1)
            self._last_log_time = now
        Trainer.log(self, {**logs, **metrics}, start_time)

    # ---------------------------------------------------------------- checkpoints
    def _get_output_dir(self, trial) -> str:
        return getattr(self, "_staging_dir", None) or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint (model/adapter, optimizer, scheduler, RNG, trainer state), written into a
        staging directory and renamed into place: a run killed mid-save leaves the previous checkpoint intact,
        and `get_last_checkpoint` never sees a half-written `checkpoint-N`."""
        run_dir = Path(super()._get_output_dir(trial))
        name = f"checkpoint-{self.state.global_step}"
        staging = run_dir / f".staging-{name}"
        if self.accelerator.is_main_process and staging.exists():
            shutil.rmtree(staging)  # left by a run killed while saving
        self.accelerator.wait_for_everyone()
        self._staging_dir = str(staging)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            next_index = self.state.global_step // self.args.num_iterations
            atomic_write_json(staging / name / RLVR_STATE, {
                "global_step": self.state.global_step,
                "next_batch_index": next_index,
                "next_example_ids": list(self.batch_example_rows(next_index)["example_id"]),
                "dataset_size": len(self.dataset),
                "config": self.args.to_dict(),
            })
            final = run_dir / name
            if final.exists():
                shutil.rmtree(final)
            os.replace(staging / name, final)
            shutil.rmtree(staging, ignore_errors=True)
            dir_fd = os.open(run_dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # make the rename durable
            finally:
                os.close(dir_fd)
            rotate_checkpoints(output_dir=str(run_dir), save_total_limit=self.args.save_total_limit,
                               best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)
        self.accelerator.wait_for_everyone()

    def _inner_training_loop(self, *args, **kwargs):
        try:
            return super()._inner_training_loop(*args, **kwargs)
        finally:
            if self.accelerator.is_main_process:
                self._loop.run_until_complete(self._openai.close())

    def save_policy(self, path: Path) -> None:
        """Final weights (adapter under LoRA), written atomically like checkpoints."""
        path = Path(path)
        staging = path.with_name(f".staging-{path.name}")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.save_model(str(staging))
        if self.accelerator.is_main_process:
            shutil.rmtree(path, ignore_errors=True)
            os.replace(staging, path)
        self.accelerator.wait_for_everyone()
