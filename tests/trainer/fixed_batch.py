"""OnPolicyTrainer on a fixed batch of samples instead of server rollouts, for the trainer-side checks that need no
vLLM server: the accumulation boundary (under DeepSpeed too), bf16 master weights, non-finite steps, what a weight
sync sends. Everything from the micro-batches on is the real trainer (transformers' loop, accelerate, the loss);
only the rollout server is replaced, by `ServerStandIn`, which hands the weights it is sent to a transport (a
recorder, or the NCCL protocol driven against a stand-in client where no GPU is at hand)."""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from choice_env import load_environment

from rlvr.trainer.batching import Sample, split_batch
from rlvr.trainer.config import MTGRPOConfig
from rlvr.trainer.mt_grpo import MTGRPOTrainer
from rlvr.trainer.on_policy import TrainBatch


class ServerStandIn:
    """What the trainer asks of its rollout server during a fixed-batch run: take weights, close."""

    url = "http://stand-in"

    def __init__(self, transport: Callable | None = None):
        self.syncs: list[dict[str, torch.Tensor]] = []
        self.transport = transport

    def update_weights(self, named_tensors, policy_version: int) -> None:
        if self.transport is not None:
            self.transport(named_tensors)
        else:
            self.syncs.append({name: t.detach().clone() for name, t in named_tensors})

    def close(self) -> None:
        pass


class FixedBatchTrainer(MTGRPOTrainer):
    """Every generated batch is `samples`, split into micro-batches as the trainer splits rollouts."""

    def __init__(self, model, args: MTGRPOConfig, samples: list[Sample], transport: Callable | None = None,
                 env=None):
        self.samples = samples
        self.transport = transport
        super().__init__(model, env or load_environment(), args, server_url="http://stand-in")

    def connect(self, server_url, model_name, tokenizer):
        self.server = ServerStandIn(self.transport)  # kept: the trainer drops its reference when training ends
        return self.server

    def generate_batch(self, batch_index: int) -> None:
        return None  # nothing to generate: make_batch hands out the fixed samples

    def make_batch(self, batch_index: int, generated: None) -> TrainBatch:
        micro = split_batch(self.forwarded_samples(self.samples), self.accelerator.num_processes, self.processing_class.pad_token_id,
                            max_samples=self.args.micro_batch_size, max_tokens=self.args.micro_batch_tokens)
        return TrainBatch(batch_index, micro, sum(sum(s.loss_mask) for s in self.samples))


def random_samples(model, count: int, length: int = 12, prompt: int = 4, seed: int = 0) -> list[Sample]:
    """`count` sequences of random tokens; the last `length - prompt` are trained, with advantages of alternating
    sign and the model's own log-probabilities as the sampler's (ratio 1: no token is clipped)."""
    rng = random.Random(seed)
    vocab = model.config.vocab_size
    samples = []
    for i in range(count):
        ids = [rng.randrange(vocab) for _ in range(length)]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
        own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist()
        mask = [0] * prompt + [1] * (length - prompt)
        advantage = 1.0 if i % 2 == 0 else -1.0
        samples.append(Sample(ids, mask, [0.0] + [lp * m for lp, m in zip(own, mask[1:], strict=True)],
                              [advantage * m for m in mask], [0 if m else -1 for m in mask]))
    return samples


def fixed_batch_config(run_dir, **overrides) -> MTGRPOConfig:
    settings = dict(output_dir=str(run_dir), max_steps=1, save_strategy="no", seed=0, batch_size=16,
                    rollouts_per_example=8, micro_batch_size=8, max_seq_len=64, learning_rate=1e-3,
                    use_lora=False, report_to="none", logging_steps=1, progress=False, weight_decay=0.0)
    settings.update(overrides)
    return MTGRPOConfig(**settings)
