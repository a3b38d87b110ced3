"""OnPolicyTrainer: the loop every on-policy recipe shares, on verifiers' RLTrainer (a transformers Trainer).

One optimizer step, top to bottom (`training_step`; transformers' loop then clips, steps the optimizer and the
scheduler, logs and checkpoints):

    every num_iterations steps:  sync weights to the server (if they changed; also before step 0) -> take the
                                 batch the `RolloutProducer` generated (groups scored by the environment's rubric,
                                 as Rollout records; up to async_steps batches ahead) -> `assign_credit` (the
                                 recipe) -> training samples -> micro-batches
    every step:                  per-token policy loss over the micro-batches (PPO clip or masked IS, + KL), the
                                 gradients accumulated over them with one accumulation boundary (the last one);
                                 a step whose loss or gradient norm is not finite changes no weight

A recipe subclasses it and implements `assign_credit` (MT-GRPO: a group estimator; PPO: a critic and GAE).
With async_steps = 0 (the default) generation is synchronous and on-policy; with k > 0 batch b + 1 ... b + k are
generated while batch b trains, and no token is trained more than k policy versions after the weights that sampled
it (rlvr.trainer.producer; the trainer README, "Generation ahead of training").
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
import verifiers as vf
from accelerate.utils import DistributedType, broadcast_object_list, gather_object
from accelerate.utils.memory import clear_device_cache
from transformers import PreTrainedModel, Trainer
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from transformers.trainer_callback import ProgressCallback
from verifiers.rl.trainer import RLTrainer
from verifiers.rl.trainer.utils import (
    finalize_stat_tracker,
    init_stat_tracker,
    pad,
    summarize_values,
    update_stat_tracker,
)
from verifiers.utils.message_utils import messages_to_printable

from rlvr.io import append_jsonl
from rlvr.rollouts import Rollout
from rlvr.trainer import group_filter, token_log
from rlvr.trainer.batching import (
    RolloutSamples,
    Sample,
    moving_samples,
    rollout_samples,
    split_batch,
    trained_samples,
)
from rlvr.trainer.checkpoint import RunState
from rlvr.trainer.config import OnPolicyConfig
from rlvr.trainer.faults import ServerDown
from rlvr.trainer.hf_overrides import TransformersOverrides
from rlvr.trainer.loss import policy_loss
from rlvr.trainer.metrics import JsonlMetricsCallback, RichProgressCallback, batch_metrics, staleness_metrics
from rlvr.trainer.policy import (
    check_head_reads_last_hidden_state,
    frozen_reference,
    load_policy,
    reference_logprobs,
    served_tensors,
    token_logprobs,
    with_lora,
)
from rlvr.trainer.producer import RolloutProducer
from rlvr.trainer.replay import ReplaySet, load_replay, replay_indices, replay_nll
from rlvr.trainer.rollout_client import (
    GeneratedBatch,
    RolloutClient,
    missing_token_ids_error,
    server_prompt_logprobs,
)

logger = logging.getLogger(__name__)


@dataclass
class TrainBatch:
    """What every process needs from one generated batch (picklable: it is broadcast from the main process)."""

    batch_index: int
    microbatches: list[list[list[Sample]]]  # [process][micro-batch][sample]
    loss_tokens: int  # trained tokens over all processes (the loss normaliser)
    metrics: dict[str, float] = field(default_factory=dict)


@contextlib.contextmanager
def accumulation_boundary(accelerator, model, is_last: bool):
    """One micro-batch's backward inside one optimizer step; the gradients are synchronised after the last one only.

    transformers' loop sets `sync_gradients=True` for the whole `training_step` (gradient_accumulation_steps is 1:
    the step's micro-batches are ours). Left so, every `accelerator.backward` would be a boundary: under DeepSpeed
    it runs `engine.step()` (clip, optimizer step, zero grad) after *each* micro-batch, so later micro-batches train
    already-updated weights and one step makes N updates; under DDP each backward all-reduces. Here accelerate sees a
    boundary on the last micro-batch only (what transformers' loop does for its own accumulation, with
    `gradient_state._set_sync_gradients` and `no_sync`), and the flag is True again when the step ends.
    """
    accelerator.gradient_state._set_sync_gradients(is_last)
    try:
        with contextlib.nullcontext() if is_last else accelerator.no_sync(model):
            yield
    finally:
        accelerator.gradient_state._set_sync_gradients(True)


def padded_tokens(rows: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded token rows and their attention mask. The mask comes from the lengths, not input_ids != pad: the
    pad token (<|im_end|>) also ends every turn."""
    lengths = torch.tensor([len(r) for r in rows], device=device)
    input_ids = pad([torch.tensor(r, device=device) for r in rows], padding_value=pad_token_id)
    return input_ids, (torch.arange(input_ids.size(1), device=device)[None] < lengths[:, None]).long()


def zero_truncated_outcome(rollout: Rollout) -> Rollout:
    """`zero_truncated_completions`: a rollout the server cut off (a turn hit its token limit, or the history outgrew
    max_seq_len) gets outcome reward 0. Turn rewards stay: they judged turns that did complete."""
    return dataclasses.replace(rollout, outcome=0.0) if rollout.truncated else rollout


@dataclass(frozen=True)
class LoggedRollouts:
    """The rollouts of a batch whose token credit is logged (token_credit.jsonl), until their logprobs are known."""

    step: int
    batch_index: int
    rollouts: list[Rollout]
    samples: list[RolloutSamples]  # with log_key set
    in_loss: list[bool]


class OnPolicyTrainer(TransformersOverrides, RLTrainer):
    label = "on-policy"  # shown on the progress bar
    algo = "on-policy"  # the algorithm's name in token_credit.jsonl (`rlvr train --algo`)

    def __init__(
        self,
        model: str | PreTrainedModel,
        env: vf.Environment,
        args: OnPolicyConfig,
        processing_class=None,
        server_url: str | None = None,
        callbacks: list | None = None,
    ):
        self.logger = logger
        model_name = model if isinstance(model, str) else model.config._name_or_path
        policy, tokenizer = load_policy(model, bf16=args.bf16, tokenizer=processing_class, lora=args.use_lora)
        if not is_deepspeed_zero3_enabled():  # ZeRO-3 loads the weights partitioned: no forward before the engine
            check_head_reads_last_hidden_state(policy, policy.device)
        self.ref_model = None
        if args.beta > 0 and not args.use_lora:
            self.ref_model = frozen_reference(policy, torch.bfloat16 if args.bf16 else None)
        policy = with_lora(policy, args.lora_config if args.use_lora else None, args)
        run_dir = Path(args.output_dir)
        callbacks = [*(callbacks or []), JsonlMetricsCallback(run_dir / "metrics.jsonl", [
            run_dir / "rollouts.jsonl", run_dir / token_log.FILE])]
        # RLTrainer.__init__ opens verifiers' NCCL communicator and starts its asynchronous generation thread
        # unconditionally; rlvr needs the CPU transport and on-policy batches, so the model preparation is done
        # above and transformers' Trainer is initialised directly. Everything else of RLTrainer is inherited.
        Trainer.__init__(self, model=policy, args=args, processing_class=tokenizer, callbacks=callbacks)
        if args.progress:
            self.remove_callback(ProgressCallback)
            self.add_callback(RichProgressCallback(self.label))
        if self.ref_model is not None:
            self.ref_model.to(self.args.device)
        # Attributes that RLTrainer's inherited methods read (get_train_dataloader, log_metrics).
        self.max_steps = args.max_steps
        self.orchestrator = None
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

        self.env = env
        self.run_dir = run_dir
        self.dataset = self.training_rows(env, tokenizer)
        self.prompts_per_batch = args.batch_size // args.rollouts_per_example
        self.sync_mode = args.weight_sync if args.weight_sync != "auto" else (
            "nccl" if torch.cuda.is_available() else "cpu")

        self._batch: TrainBatch | None = None
        self._synced_at_step: int | None = None
        self._pending: dict[str, float] = {}  # timings of this step's generation and sync
        self._token_log: LoggedRollouts | None = None  # main process: the batch's logged rollouts, until written
        self._token_logprobs: dict | None = None  # log_key -> per-position logprobs, while a fresh batch is forwarded
        self._step_loss_finite = True
        self.skipped_steps = 0  # optimizer steps skipped for a non-finite loss or gradient norm
        self._deepspeed_skipped = 0  # DeepSpeed's own count (engine.skipped_steps) at the last step
        self._last_log_time = time.perf_counter()
        self.rollouts: RolloutClient | None = None
        self.producer: RolloutProducer | None = None  # main process: generates the batches (rlvr.trainer.producer)
        self._proximal: dict[int, torch.Tensor] = {}  # decoupled_clip: micro-batch -> the batch's first logprobs
        self.server_watch = None  # main process: rlvr.trainer.faults.ServerWatch, set by run_training
        self.replay: ReplaySet | None = None  # sft_replay's demonstrations (rlvr.trainer.replay)
        if args.sft_replay is not None:
            self.replay = load_replay(args.sft_replay, tokenizer, args.sft_replay_min_reward, args.max_seq_len)
        if self.accelerator.is_main_process:
            self.rollouts = self.connect(server_url or f"http://{args.vllm_server_host}:{args.vllm_server_port}",
                                         model_name, tokenizer)

    def connect(self, server_url: str, model_name: str, tokenizer) -> RolloutClient:
        """The rollout server, checked (main process only)."""
        args = self.args
        return RolloutClient(
            server_url, model_name, tokenizer, sampling_args=args.sampling_args, max_concurrent=args.max_concurrent,
            timeout=args.generation_timeout, sync=self.sync_mode, connection_timeout=args.vllm_server_timeout,
            sampling_seed=args.seed if args.seed_sampling else None, token_prompts=args.token_prompts,
        )

    def training_rows(self, env: vf.Environment, tokenizer):
        """The environment's training rows whose first prompt fits `prompt_token_limit` (max_prompt_len, else
        max_seq_len), after limiting the environment's sequences to max_seq_len.

        verifiers truncates the token ids of a turn whose prompt + completion outgrow the environment's max_seq_len
        (and gives a turn whose prompt alone is too long no completion to train), so no training sample is longer
        than max_seq_len; a row whose first prompt already fills it could never train and is dropped up front.
        """
        args = self.args
        if env.max_seq_len is None or env.max_seq_len > args.max_seq_len:
            env.set_max_seq_len(args.max_seq_len)  # EnvGroup passes it on to its environments
        dataset = env.get_dataset()
        if len(dataset) == 0:
            raise ValueError("the environment's training dataset is empty: check load_environment's arguments")
        limit = args.prompt_token_limit
        lengths = [len(tokenizer.apply_chat_template(p, tokenize=True, add_generation_prompt=True, return_dict=False)
                       if isinstance(p, list) else tokenizer(p)["input_ids"]) for p in dataset["prompt"]]
        kept = [i for i, n in enumerate(lengths) if n <= limit]
        if not kept:
            raise ValueError(f"every training prompt is longer than {limit} tokens (the shortest has {min(lengths)}): "
                             "raise max_prompt_len / max_seq_len")
        if len(kept) < len(dataset):
            logger.warning(f"{len(dataset) - len(kept)} of {len(dataset)} training prompts are longer than {limit} "
                           "tokens (max_prompt_len, else max_seq_len) and are left out")
            dataset = dataset.select(kept)
        self.dataset_fingerprint = dataset._fingerprint
        return dataset.shuffle(seed=args.seed) if args.shuffle_dataset else dataset

    # ---------------------------------------------------------------- the recipe's part
    @classmethod
    def preflight(cls, env: vf.Environment, args: OnPolicyConfig) -> None:
        """Checks of the environment against the configuration that must fail before a server starts."""

    def assign_credit(self, rollouts: list[Rollout]) -> list[Rollout]:
        """The batch's rollouts with one advantage per turn (`Rollout.advantages`)."""
        raise NotImplementedError

    def make_samples(self, rollouts: list[Rollout]) -> tuple[list[Rollout], list[RolloutSamples]]:
        """Credit, then one training sample per rollout (or per turn). A recipe whose advantages are per token
        (PPO's GAE over critic values) overrides this and fills `Sample.advantages` itself."""
        rollouts = self.assign_credit(rollouts)
        return rollouts, [rollout_samples(r, pack=self.args.pack_trajectories) for r in rollouts]

    # ---------------------------------------------------------------- data
    def batch_example_rows(self, batch_index: int):
        """The prompts of batch `batch_index`: consecutive rows of the seeded shuffle, wrapping around.

        A pure function of the index, so a resumed run (global_step restored) takes the same next batch.
        """
        n = len(self.dataset)
        start = batch_index * self.prompts_per_batch
        return self.dataset.select([(start + i) % n for i in range(self.prompts_per_batch)])

    def run_state(self) -> RunState:
        args = self.args
        next_index = self.state.global_step // args.num_iterations
        return RunState(
            global_step=self.state.global_step, next_batch_index=next_index,
            next_example_ids=list(self.batch_example_rows(next_index)["example_id"]), seed=args.seed,
            batch_size=args.batch_size, rollouts_per_example=args.rollouts_per_example,
            num_iterations=args.num_iterations, dataset_size=len(self.dataset),
            dataset_fingerprint=self.dataset_fingerprint, config=args.to_dict(),
        )

    # ---------------------------------------------------------------- generation (main process)
    def generate_batch(self, batch_index: int) -> GeneratedBatch:
        """Roll out batch `batch_index` on the server (the producer's part: no trainer state is touched); with
        filter_groups, only groups with spread, from further rounds of prompts as needed (group_filter)."""
        args = self.args
        generated = self.rollouts.generate(self.env, self.batch_example_rows(batch_index), args.rollouts_per_example,
                                           batch=batch_index)
        if not args.filter_groups:
            return generated
        example_ids = self.dataset["example_id"]

        def roll_more(generation_round: int, used: set[int]) -> GeneratedBatch | None:
            positions = group_filter.extra_prompt_positions(example_ids, used, self.prompts_per_batch, seed=args.seed,
                                                            batch=batch_index, generation_round=generation_round)
            if not positions:  # every example of the dataset is in the batch already
                return None
            return self.rollouts.generate(self.env, self.dataset.select(positions), args.rollouts_per_example,
                                          batch=group_filter.round_seed_batch(batch_index, generation_round))

        return group_filter.batch_with_spread(generated, roll_more, self.prompts_per_batch, args.max_generation_rounds,
                                              self.group_has_spread)

    def group_has_spread(self, group) -> bool:
        """Whether dynamic sampling keeps a group: its rollouts' outcomes differ (DAPO), or with filter_groups_by =
        "advantage" the recipe's credit (`assign_credit`, pure) gives some turn of it a non-zero advantage."""
        if self.args.filter_groups_by == "advantage":
            return group_filter.advantage_spread(self.assign_credit(list(group)))
        return group_filter.outcome_spread(group)

    def next_batch(self, batch_index: int) -> TrainBatch:
        """Batch `batch_index`, generated by the producer (ahead of time when async_steps > 0); the current weights
        (version `batch_index`) are on the server."""
        args = self.args
        if self.producer is None:
            last = (args.max_steps - 1) // args.num_iterations if args.max_steps > 0 else sys.maxsize
            self.producer = RolloutProducer(self.generate_batch, lookahead=args.async_steps, first=batch_index,
                                            last=last)
        self.producer.release(batch_index)
        start = time.perf_counter()
        generated = self.producer.take(batch_index)
        # the trainer's idle time: the whole generation when synchronous, what is left of it when ahead
        self._pending["timing/wait_for_batch_s"] = time.perf_counter() - start
        return self.make_batch(batch_index, generated)

    def stop_producer(self) -> None:
        """Drop the batches generated ahead (a recovered or resumed run generates them again from their index)."""
        if self.producer is not None:
            self.producer.stop()
            self.producer = None

    def make_batch(self, batch_index: int, generated: GeneratedBatch) -> TrainBatch:
        """Assign credit to a generated batch and split it into micro-batches of samples (on the trainer's thread:
        PPO's values come from the critic as it is now)."""
        args = self.args
        rollouts = generated.rollouts
        if args.zero_truncated_completions:
            rollouts = [zero_truncated_outcome(r) for r in rollouts]
        rollouts, per_rollout = self.make_samples(rollouts)
        logged = token_log.logged_rollouts(len(rollouts), args.rollouts_per_example, args.num_logged_token_groups)
        per_rollout = token_log.with_log_keys(per_rollout, logged)
        if not any(s.samples for s in per_rollout):
            if any(r.turns for r in rollouts):
                raise missing_token_ids_error(self.rollouts.url)
            errors = [r.error for r in rollouts if r.error is not None][:3]
            raise RuntimeError(f"batch {batch_index}: no rollout produced an assistant turn; errors: {errors}")
        metrics = batch_metrics(rollouts, per_rollout)
        trained = trained_samples(rollouts, per_rollout, args.mask_truncated_completions)
        forwarded = self.forwarded_samples(trained)
        micro = split_batch(forwarded, self.accelerator.num_processes, self.processing_class.pad_token_id,
                            max_samples=args.micro_batch_size, max_tokens=args.micro_batch_tokens)
        metrics.update({
            "timing/generation_s": generated.generation_s, "timing/scoring_s": generated.scoring_s,
            "tokens/generation_per_s": metrics["tokens/generated"] / max(generated.generation_s, 1e-9),
            "batch/truncated_fraction": sum(r.truncated for r in rollouts) / len(rollouts),
            "batch/max_sample_tokens": float(max((len(s) for s in trained), default=0)),
            "batch/microbatches": float(len(micro[0])),
            "batch/skipped_zero_advantage_fraction": 1.0 - len(forwarded) / max(len(trained), 1),
            **({"batch/generation_rounds": float(generated.generation_rounds),
                "batch/dropped_groups": float(generated.dropped_groups)} if args.filter_groups else {}),
            **staleness_metrics(rollouts, trained, version=batch_index, bound=args.async_steps),
        })
        self.log_rollouts(batch_index, rollouts, per_rollout)
        if logged:
            self._token_log = LoggedRollouts(
                self.state.global_step, batch_index, rollouts[:logged], per_rollout[:logged],
                [not (args.mask_truncated_completions and r.truncated) for r in rollouts[:logged]])
        return TrainBatch(batch_index, micro, sum(sum(s.loss_mask) for s in trained), metrics)

    def forwarded_samples(self, trained: list[Sample]) -> list[Sample]:
        """The trained samples that go through forward and backward (all of them when a KL term or a subclass
        needs every sample); the loss still divides by every trained token of the batch."""
        if self.args.skip_zero_advantage and self.args.beta == 0:
            return moving_samples(trained)
        return trained

    def log_rollouts(self, batch_index: int, rollouts: list[Rollout], samples: list[RolloutSamples]) -> None:
        """One line per generated batch in rollouts.jsonl: the batch's example ids and a few full rollouts."""
        shown = []
        for r, s in list(zip(rollouts, samples, strict=True))[: self.args.num_logged_rollouts]:
            shown.append({
                "example_id": r.example_id, "reward": r.outcome, "truncated": r.truncated,
                "prompt": messages_to_printable(r.prompt), "completion": messages_to_printable(r.completion),
                "turn_rewards": r.turn_rewards, "turn_advantages": list(r.advantages or []),
                "packed": s.packed, "not_packed_because": s.reason, "error": r.error or "",
            })
        append_jsonl(self.run_dir / "rollouts.jsonl", {
            "step": self.state.global_step, "batch_index": batch_index,
            "example_ids": [r.example_id for r in rollouts], "rollouts": shown,
        })

    # ---------------------------------------------------------------- weight sync
    def sync_weights(self) -> None:
        """Send the current policy to the server (all processes call it); logs seconds and, if asked, the check.

        Both transports start with a sync before step 0 (verifiers' update_vllm skips it): the server may hold other
        weights than the policy (a resumed run, a server left from an earlier run, a dtype cast at load).
        """
        verify = self.args.verify_weight_sync and self.accelerator.is_main_process
        if verify and self._synced_at_step is not None:
            # The same check against the server's previous weights: shows the check can tell them apart.
            self._pending["sync/max_abs_logprob_diff_before"] = self.weight_sync_error()
        start = time.perf_counter()
        model = self.accelerator.unwrap_model(self.model)
        failed = None
        with self.gathered_parameters(model):
            if self.accelerator.is_main_process:
                try:
                    self.push_weights(model)
                except Exception as err:  # the server died mid-sync: raised after the barrier (recover_batch)
                    failed = err
        # Every process leaves the sync here, failed or not, so that the main process's recovery finds the others
        # in the batch's broadcast, the next collective.
        self.accelerator.wait_for_everyone()
        self._synced_at_step = self.state.global_step
        self._pending["timing/sync_s"] = time.perf_counter() - start
        if failed is not None:
            raise failed
        if verify:
            self._pending["sync/max_abs_logprob_diff"] = self.weight_sync_error()

    def push_weights(self, model) -> None:
        """The main process's part of a sync: the policy's tensors to the server, as version global_step //
        num_iterations (under ZeRO-3 inside `gathered_parameters`)."""
        self.rollouts.update_weights(served_tensors(model),
                                     policy_version=self.state.global_step // self.args.num_iterations)

    def parameters_sharded(self) -> bool:
        """DeepSpeed ZeRO-3: every rank holds a shard of each parameter, so a push needs every rank."""
        plugin = self.accelerator.state.deepspeed_plugin
        return plugin is not None and plugin.zero_stage == 3

    def gathered_parameters(self, model):
        """Under ZeRO-3, gather the parameters for the sync (every rank takes part; the whole model is then
        resident, as in verifiers' update_vllm under PEFT)."""
        if not self.parameters_sharded():
            return contextlib.nullcontext()
        import deepspeed

        return deepspeed.zero.GatheredParameters(list(model.parameters()))

    def weight_sync_error(self) -> float:
        """Max |server logprob - trainer logprob| over the first prompt's tokens, at temperature 1."""
        input_ids = list(self.processing_class.apply_chat_template(
            self.dataset[0]["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False))
        served = torch.tensor(server_prompt_logprobs(self.rollouts.url, self.rollouts.model, input_ids))
        model = self.accelerator.unwrap_model(self.model)
        with torch.no_grad():
            ids = torch.tensor([input_ids], device=self.accelerator.device)
            logits = model(input_ids=ids).logits[0, :-1].float()
            ours = torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0].cpu()
        return float((served - ours).abs().max())

    def recover_batch(self, batch_index: int, err: Exception) -> TrainBatch:
        """After a failed weight sync or generation (main process): re-raises `err` when the server is healthy;
        otherwise `server_watch` restarts the server or waits for it (or raises ServerDown naming it), and the
        current weights are pushed and the batch generated again.

        The main process does this alone, without collectives: under --num-processes the others wait in the batch's
        broadcast meanwhile (a sync that failed was left by every process together, `sync_weights`). Under ZeRO-3
        with several processes a push needs every rank's shards, so there the server is named and training stops.
        """
        model_name = self.rollouts.model
        self.stop_producer()  # its batches came from the failed server; the next step starts a new one
        alone = self.accelerator.num_processes == 1 or not self.parameters_sharded()
        while True:
            url = self.server_watch.recover(err) if alone else self.server_watch.check(err)
            if url is None:
                raise err
            try:
                if self.rollouts is not None:
                    self.rollouts.close()
                    self.rollouts = None
                self.rollouts = self.connect(url, model_name, self.processing_class)
                model = self.accelerator.unwrap_model(self.model)
                with self.gathered_parameters(model):  # one process under ZeRO-3: its own, whole parameters
                    self.push_weights(model)  # a restarted server holds the base weights
                return self.make_batch(batch_index, self.generate_batch(batch_index))
            except Exception as again:  # the new server failed too: the watch decides again (its retries are bounded)
                err = again

    # ---------------------------------------------------------------- one optimizer step
    def training_step(self, model, inputs=None, num_items_in_batch=None) -> torch.Tensor:
        args = self.args
        step = self.state.global_step
        iteration = step % args.num_iterations
        fresh = iteration == 0 or self._batch is None
        if fresh:
            batch: list[TrainBatch | ServerDown | None] = [None]
            try:
                if self._synced_at_step != step:
                    self.sync_weights()
                if self.accelerator.is_main_process:
                    batch = [self.next_batch(step // args.num_iterations)]
            except Exception as err:
                if self.server_watch is None:
                    raise
                try:
                    batch = [self.recover_batch(step // args.num_iterations, err)]
                except ServerDown as down:
                    if self.accelerator.num_processes == 1:
                        raise
                    batch = [down]  # the other processes wait in the broadcast: all of them stop with it
            broadcast_object_list(batch, from_process=0)
            if isinstance(batch[0], ServerDown):
                raise batch[0]
            self._batch = batch[0]
        batch = self._batch

        start = time.perf_counter()
        self._token_logprobs = {} if fresh and args.num_logged_token_groups else None
        total_loss, forwarded, train_metrics = self.accumulate_gradients(model, batch, iteration)
        training_s = time.perf_counter() - start
        if self._token_logprobs is not None:
            self.write_token_credit()
        # Every rank must agree on skipping: the verdict on the loss is reduced over ranks.
        finite = self.accelerator.gather(torch.isfinite(total_loss).float()[None]).min()
        self._step_loss_finite = bool(finite.item() == 1.0) and (batch.loss_tokens > 0 or self.replay is not None)

        if self.accelerator.is_main_process:
            step_metrics = {**(batch.metrics if iteration == 0 else {}), **self._pending,
                            **{k: v for k, v in train_metrics.items() if v is not None},
                            "timing/training_s": training_s, "tokens/training_per_s": forwarded / training_s,
                            "iteration": float(iteration)}
            self.log_metrics("train", step_metrics)  # RLTrainer: buffered until Trainer.log averages them
        self._pending = {}
        if args.torch_empty_cache_steps and step % args.torch_empty_cache_steps == 0:
            clear_device_cache()
        return total_loss

    def accumulate_gradients(self, model, batch: TrainBatch, iteration: int) -> tuple[torch.Tensor, int, dict]:
        """Forward and backward over this process's micro-batches, gradients accumulated in the parameters.
        Returns the summed loss, the tokens forwarded and the step's statistics."""
        args = self.args
        model.train()
        device = self.accelerator.device
        # Token-level normalisation over the whole batch (verifiers RLTrainer; DAPO, arXiv 2503.14476, Eq. 8):
        # DDP averages gradients over ranks, so each rank divides by (all trained tokens / ranks).
        inv_tokens = torch.tensor(self.accelerator.num_processes / max(batch.loss_tokens, 1), device=device)
        # Ratio and clipping per staleness (policy versions between sampler and trainer): buckets 0..async_steps on
        # every rank, so the reduction over ranks matches.
        staleness_buckets = range(args.async_steps + 1)
        names = ["ratio", "clipped", "entropy", "kl", "mismatch_kl", "behavior_weight", "behavior_weight_capped",
                 *(f"{what}_by_staleness/{s}" for what in ("ratio", "clipped") for s in staleness_buckets)]
        trackers = {k: init_stat_tracker(device) for k in names}
        if iteration == 0:
            self._proximal = {}
        total_loss = torch.zeros((), device=device)
        forwarded = 0
        micro_batches = batch.microbatches[self.accelerator.process_index]
        replay_stats = {}
        if self.replay is not None:
            total_loss, forwarded, replay_stats = self.replay_gradients(model)
        for index, micro in enumerate(micro_batches):
            input_ids, attention_mask = padded_tokens([s.input_ids for s in micro],
                                                      self.processing_class.pad_token_id, device)
            # Position p predicts token p + 1: only positions whose next token is trained need logits.
            trained = pad([torch.tensor(s.loss_mask, device=device) for s in micro])[:, 1:].bool()
            keep = trained.any(0).nonzero().squeeze(-1)
            if keep.numel() == 0:  # a filler micro-batch still runs forward/backward (DDP all-reduces)
                keep = torch.zeros(1, dtype=torch.long, device=device)
            loss_mask = trained[:, keep]
            # Untrained positions get neutral inputs: a NaN or inf there (a server's -inf logprob, a padded value)
            # would otherwise reach the gradient through 0 * NaN in the backward pass.
            behavior = torch.where(loss_mask, pad([torch.tensor(s.behavior_logprobs, device=device)
                                                   for s in micro])[:, 1:][:, keep], 0.0)
            advantages = torch.where(loss_mask, pad([torch.tensor(s.advantages, device=device)
                                                     for s in micro])[:, 1:][:, keep], 0.0)
            versions = pad([torch.tensor(s.versions if s.versions is not None else [-1] * len(s), device=device)
                            for s in micro], padding_value=-1)[:, 1:][:, keep]
            staleness = torch.where(versions >= 0, batch.batch_index - versions, -1)
            forwarded += int(attention_mask.sum())

            with accumulation_boundary(self.accelerator, model, is_last=index == len(micro_batches) - 1):
                with self.accelerator.autocast():  # bf16: compute in bf16, the weights stay float32
                    logprobs, entropies = token_logprobs(model, input_ids, attention_mask, keep, args.temperature,
                                                         args.logprob_chunk_tokens)
                    if self._token_logprobs is not None:
                        self.keep_token_logprobs(micro, logprobs, keep)
                    ref_logprobs = None
                    if args.beta > 0:
                        unwrapped = self.accelerator.unwrap_model(model)
                        ref_logprobs = reference_logprobs(unwrapped, self.ref_model, input_ids, attention_mask, keep,
                                                          args.temperature, args.logprob_chunk_tokens)
                    proximal = None
                    if args.loss_type == "decoupled_clip":
                        # AReaL's proximal policy: the weights at the start of this batch's training, i.e. this
                        # forward at iteration 0 (one optimizer step later they have moved)
                        if iteration == 0:
                            self._proximal[index] = logprobs.detach()
                        proximal = torch.where(loss_mask, self._proximal[index], 0.0)
                    terms = policy_loss(
                        logprobs, behavior, advantages, loss_type=args.loss_type,
                        epsilon_low=args.epsilon_low, epsilon_high=args.epsilon_high,
                        mask_ratio_low=args.mask_ratio_low, mask_ratio_high=args.mask_ratio_high,
                        ref_logprobs=ref_logprobs, beta=args.beta,
                        proximal_logprobs=proximal, behavior_weight_cap=args.behavior_weight_cap,
                    )
                    # A select, not a product: inf x 0 is NaN.
                    loss = torch.where(loss_mask, terms.loss, 0.0).sum() * inv_tokens
                self.accelerator.backward(loss)
            total_loss = total_loss + loss.detach()

            with torch.no_grad():
                update_stat_tracker(trackers["ratio"], summarize_values(terms.ratio[loss_mask]))
                update_stat_tracker(trackers["clipped"], summarize_values(terms.is_clipped[loss_mask].float()))
                update_stat_tracker(trackers["entropy"], summarize_values(entropies[loss_mask]))
                if terms.kl is not None:
                    update_stat_tracker(trackers["kl"], summarize_values(terms.kl[loss_mask]))
                if terms.behavior_weight is not None:
                    update_stat_tracker(trackers["behavior_weight"], summarize_values(terms.behavior_weight[loss_mask]))
                    update_stat_tracker(trackers["behavior_weight_capped"],
                                        summarize_values(terms.weight_capped[loss_mask].float()))
                for s in staleness_buckets:
                    in_bucket = loss_mask & (staleness == s)
                    update_stat_tracker(trackers[f"ratio_by_staleness/{s}"], summarize_values(terms.ratio[in_bucket]))
                    update_stat_tracker(trackers[f"clipped_by_staleness/{s}"],
                                        summarize_values(terms.is_clipped[in_bucket].float()))
                if iteration == 0:
                    # Sampler-vs-trainer mismatch on freshly synced weights (verifiers' "mismatch_kl", k3 form):
                    # near 0 when the sync and both forward passes agree. Tokens sampled by older weights
                    # (async_steps) differ by design: their ratios are in train/ratio_by_staleness.
                    log_r = logprobs - behavior
                    current = loss_mask & (staleness <= 0)
                    update_stat_tracker(trackers["mismatch_kl"],
                                        summarize_values((torch.exp(log_r) - log_r - 1)[current]))
        stats = {f"train/{k}": finalize_stat_tracker(t, self.accelerator) for k, t in trackers.items()}
        return total_loss, forwarded, {**stats, **replay_stats}

    def replay_gradients(self, model) -> tuple[torch.Tensor, int, dict[str, float]]:
        """sft_replay's term (rlvr.trainer.replay): sft_replay_coef x the mean NLL of this step's demonstrations,
        backward before the policy's micro-batches, whose last one ends the step's accumulation (and DDP's sync).
        The step's logged loss includes it; train/replay_nll is its mean NLL per demonstration token. Returns the
        term, the tokens forwarded and its statistics."""
        args, replay, device = self.args, self.replay, self.accelerator.device
        rows = replay_indices(len(replay), args.sft_replay_batch, args.seed, self.state.global_step,
                              self.accelerator.process_index)
        tokens = sum(sum(replay.action_mask[i][1:]) for i in rows)
        scale = args.sft_replay_coef / max(tokens, 1)
        total, forwarded = torch.zeros((), device=device), 0
        start = time.perf_counter()
        for first in range(0, len(rows), args.micro_batch_size):
            micro = rows[first:first + args.micro_batch_size]
            input_ids, attention_mask = padded_tokens([replay.input_ids[i] for i in micro],
                                                      self.processing_class.pad_token_id, device)
            action_mask = pad([torch.tensor(replay.action_mask[i], device=device) for i in micro])
            with accumulation_boundary(self.accelerator, model, is_last=False):
                with self.accelerator.autocast():
                    nll, _ = replay_nll(model, input_ids, attention_mask, action_mask, args.logprob_chunk_tokens)
                    loss = nll * scale
                self.accelerator.backward(loss)
            total = total + loss.detach()
            forwarded += int(attention_mask.sum())
        return total, forwarded, {"train/replay_nll": total.item() / args.sft_replay_coef, "train/replay_tokens": float(tokens),
                       "timing/replay_s": time.perf_counter() - start}

    # ---------------------------------------------------------------- token_credit.jsonl
    def keep_token_logprobs(self, micro: list[Sample], logprobs: torch.Tensor, keep: torch.Tensor) -> None:
        """The logprobs of the micro-batch's logged samples, per position of each sample (None where the token is
        not trained): column c of `logprobs` is position keep[c], which predicts token keep[c] + 1."""
        rows = [(row, s) for row, s in enumerate(micro) if s.log_key is not None]
        if not rows:
            return
        column = {int(p) + 1: c for c, p in enumerate(keep.tolist())}
        values = logprobs.detach()[[row for row, _ in rows]].float().cpu().tolist()
        for (_, s), row in zip(rows, values, strict=True):
            self._token_logprobs[s.log_key] = [row[column[t]] if m and t in column else None
                                               for t, m in enumerate(s.loss_mask)]

    def token_values(self, sample: Sample) -> list[float] | None:
        """The critic's value of the state before each token of `sample`, as credit used it (None: no critic)."""
        return None

    def write_token_credit(self) -> None:
        """Append the logged rollouts of the batch just forwarded to token_credit.jsonl, with the logprobs every
        process kept (gathered on the main process: all processes call this)."""
        kept = list(self._token_logprobs.items())
        self._token_logprobs = None
        if self.accelerator.num_processes > 1:
            kept = gather_object(kept)
        logged, self._token_log = self._token_log, None
        if not self.accelerator.is_main_process or logged is None:
            return
        logprobs = dict(kept)
        for index, (rollout, samples, in_loss) in enumerate(zip(logged.rollouts, logged.samples, logged.in_loss,
                                                                strict=True)):
            record = token_log.token_credit_record(
                step=logged.step, batch_index=logged.batch_index, index=index,
                rollouts_per_example=self.args.rollouts_per_example, algo=self.algo, rollout=rollout,
                samples=samples, tokenizer=self.processing_class, in_loss=in_loss,
                logprobs=[logprobs.get(s.log_key) for s in samples.samples],
                values=[self.token_values(s) for s in samples.samples],
            )
            append_jsonl(self.run_dir / token_log.FILE, record.to_json())

    def skip_nonfinite_update(self, model, grad_norm) -> None:
        """Called between gradient clipping and the optimizer step (TransformersOverrides._get_grad_norm): when the
        step's loss or gradient norm is not finite (or it trained no token), drop every gradient, so the optimizer
        leaves weights and moments alone (torch optimizers skip parameters without a gradient). The step still
        counts: global_step and the learning-rate schedule advance. DeepSpeed has stepped already inside the last
        backward; its ZeRO optimizer skips a step whose gradients overflow, and that skip is counted here."""
        if self.accelerator.distributed_type == DistributedType.DEEPSPEED:
            engine = self.model_wrapped
            skipped = engine.skipped_steps > self._deepspeed_skipped
            self._deepspeed_skipped = engine.skipped_steps
        else:
            norm = float(grad_norm) if grad_norm is not None else 0.0
            skipped = not (self._step_loss_finite and math.isfinite(norm))
            if skipped:
                for p in model.parameters():
                    p.grad = None
        if skipped:
            self.skipped_steps += 1
            logger.warning(f"step {self.state.global_step + 1}: the loss or the gradient norm is not finite (or no "
                           f"token was trained; grad norm {grad_norm}): optimizer step skipped "
                           f"({self.skipped_steps} so far)")
        if self.accelerator.is_main_process:
            self.log_metrics("train", {"train/skipped_step": float(skipped),
                                       "train/skipped_steps_total": float(self.skipped_steps)})

    # ---------------------------------------------------------------- end
    def close(self) -> None:
        self.stop_producer()
        if self.rollouts is not None:
            self.rollouts.close()
            self.rollouts = None

    def save_policy(self, path: Path) -> None:
        """Final weights (adapter under LoRA), written atomically like checkpoints."""
        import shutil

        from rlvr.trainer.checkpoint import publish

        path = Path(path)
        staging = path.with_name(f".staging-{path.name}")
        if self.accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
        self.save_model(str(staging))
        if self.accelerator.is_main_process:
            publish(staging, path)
        self.accelerator.wait_for_everyone()
