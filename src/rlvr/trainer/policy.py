"""The policy being trained: loading (dtype, LoRA), its reference model, per-token log-probabilities, and the
weights a rollout server should serve. Shared by every recipe (MT-GRPO, PPO's actor, OREO's policy)."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
from accelerate.utils import is_peft_model
from peft import PeftConfig
from peft.tuners.lora import LoraLayer
from torch.utils.checkpoint import checkpoint
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel


def trained_weights_dtype(bf16: bool, lora: bool) -> torch.dtype:
    """The dtype a trained model is loaded in: float32, or bfloat16 for a LoRA base (frozen) under bf16 (see
    load_policy)."""
    return torch.bfloat16 if bf16 and lora else torch.float32


def load_policy(model: str | PreTrainedModel, *, bf16: bool, tokenizer=None, lora: bool = False):
    """The trainable model and its tokenizer; a registered name ("tiny-random") resolves through rlvr.models.

    Weights that the optimizer updates are kept in float32 even when `bf16=True` (bf16 is then the compute dtype,
    through autocast or DeepSpeed's bf16 mode): AdamW steps of lr 1e-6 on bfloat16 weights mostly round back to the
    same value (bf16 keeps 8 bits of mantissa), so a bf16 master copy barely trains. Under LoRA (`lora=True`) the base
    weights are frozen and may stay in bf16; the adapters peft adds are float32.
    """
    if isinstance(model, PreTrainedModel):
        return model, tokenizer or AutoTokenizer.from_pretrained(model.config._name_or_path)
    from rlvr.models import resolve

    path = resolve(model)
    dtype = trained_weights_dtype(bf16, lora)
    # sdpa, not verifiers' flash_attention_2 default: it runs on CPU and GPU alike.
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return policy, tokenizer


def with_lora(model: PreTrainedModel, lora_config: PeftConfig | None, args) -> PreTrainedModel:
    """Wrap the model in a LoRA adapter (verifiers' prepare_peft_model) when a config is given."""
    # Imported here: verifiers' RL package pulls in vLLM, which a GPU training machine without a server lacks, and
    # nothing else in this module needs it (`make gpu-check` imports this module there).
    from verifiers.rl.trainer.utils import prepare_peft_model

    return prepare_peft_model(model, lora_config, args) if isinstance(lora_config, PeftConfig) else model


def frozen_reference(model: PreTrainedModel, dtype: torch.dtype | None = None) -> PreTrainedModel:
    """A frozen copy of the initial policy: the KL reference of full fine-tuning (GRPO, DeepSeekMath Sec. 4.1).
    Under LoRA no copy is needed: the reference is the policy with its adapter disabled (`reference_logprobs`).
    `dtype`: the copy's dtype (bf16 training: it is never updated, so it needs no float32 master weights)."""
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    return reference.to(dtype) if dtype is not None else reference


# ---------------------------------------------------------------------------------------------- log-probabilities
def _head_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability of `targets` and the entropy of the tempered distribution at rows of `hidden` (n, H).
    The softmax is taken in float32 whatever the compute dtype (bf16 logits lose the small probabilities). In-place
    steps where autograd allows them: each (n, vocabulary) temporary is the memory this chunking exists to bound."""
    logits = head(hidden).float().div_(temperature)  # the head's backward needs its input, not its output
    logprobs = logits.log_softmax(-1)
    with torch.no_grad():
        entropy = -logprobs.exp().mul_(logprobs).sum(-1)
    return logprobs.gather(-1, targets[:, None])[:, 0], entropy


def token_logprobs(model, input_ids, attention_mask, keep, temperature: float,
                   chunk_tokens: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (at the sampling temperature, as verifiers' RLTrainer.get_logprobs) and entropies of the
    tokens that follow positions `keep`, shape (B, len(keep)).

    The LM head runs on those positions only (prompt and environment positions need none), and on at most
    `chunk_tokens` of them at a time: each chunk's logits (chunk x vocabulary, the largest activation of a small
    model with a 50k-150k vocabulary) are dropped after its log-softmax and recomputed in the backward pass
    (activation checkpointing), so memory holds one chunk's logits instead of every position's.

    The model is called as a whole (DDP and DeepSpeed hook its forward) with no logits kept; its last hidden state is
    what its LM head reads (`check_head_reads_last_hidden_state`).
    """
    no_logits = keep[:0]
    hidden = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=no_logits,
                   output_hidden_states=True).hidden_states[-1]
    hidden = hidden[:, keep]  # (B, K, H)
    targets = input_ids[:, keep + 1]
    head = _unwrap(model).get_output_embeddings()
    rows, hidden_size = targets.numel(), hidden.size(-1)
    flat_hidden, flat_targets = hidden.reshape(rows, hidden_size), targets.reshape(rows)
    logprobs, entropies = [], []
    for start in range(0, rows, chunk_tokens):
        chunk = (flat_hidden[start:start + chunk_tokens], flat_targets[start:start + chunk_tokens])
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_head_logprobs, head, *chunk, temperature, use_reentrant=False)
        else:
            lp, ent = _head_logprobs(head, *chunk, temperature)
        logprobs.append(lp)
        entropies.append(ent)
    return torch.cat(logprobs).view_as(targets), torch.cat(entropies).view_as(targets)


def _unwrap(model):
    """The model under DDP / DeepSpeed wrappers (their `module`), for its LM head."""
    while hasattr(model, "module") and not isinstance(model, PreTrainedModel) and not is_peft_model(model):
        model = model.module
    return model


def check_head_reads_last_hidden_state(model, device) -> None:
    """`token_logprobs` applies the LM head to the last hidden state itself: refuse a model whose logits are more
    than that (e.g. Gemma-2's final logit soft-capping), which would silently train on other log-probabilities."""
    ids = torch.arange(1, 9, device=device)[None]
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
        ours = _unwrap(model).get_output_embeddings()(out.hidden_states[-1])
    if not torch.allclose(ours.float(), out.logits.float(), atol=1e-3, rtol=1e-3):
        raise ValueError(
            f"{type(_unwrap(model)).__name__}: the LM head applied to the last hidden state does not give the model's "
            f"logits (max difference {(ours.float() - out.logits.float()).abs().max():.3g}): the model transforms its "
            "logits further (e.g. soft-capping), which rlvr's chunked log-probabilities do not reproduce"
        )


def reference_logprobs(model, ref_model, input_ids, attention_mask, keep, temperature: float,
                       chunk_tokens: int = 512) -> torch.Tensor:
    """The reference policy's log-probabilities: the frozen copy, or (LoRA) the policy with its adapter off."""
    with torch.no_grad():
        if ref_model is not None:
            return token_logprobs(ref_model, input_ids, attention_mask, keep, temperature, chunk_tokens)[0]
        with model.disable_adapter():
            return token_logprobs(model, input_ids, attention_mask, keep, temperature, chunk_tokens)[0]


# ---------------------------------------------------------------------------------------------- served weights
def _merged_lora_weight(layer: LoraLayer, weight: torch.Tensor) -> torch.Tensor:
    """W + sum of the active adapters' deltas (LoRA, Hu et al. 2021, Eq. 3: W + (alpha / r) B A), as a new tensor.

    peft's `merge_adapter` adds the delta into the base weight in place and `unmerge_adapter` subtracts it again;
    in bf16 each round trip rounds, so the frozen base (and the adapter-disabled reference) drifts a little with
    every sync. Building the merged tensor out of place leaves the base untouched; the value is merge's (the delta
    added in float32, rounded once to the weight's dtype).
    """
    if layer.merged:  # someone merged in place: the base already holds the delta
        return weight.detach().clone()
    merged = weight.detach().float()
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        if layer.use_dora.get(adapter, False):
            raise NotImplementedError("weight sync of a DoRA adapter: its merge is not W + delta; use plain LoRA")
        merged = merged + layer.get_delta_weight(adapter).float()
    return merged.to(weight.dtype)


def served_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) for every weight a server should serve: LoRA merged, out of place and one tensor at
    a time (the NCCL transport streams them; nothing holds a second copy of the model).

    `state_dict()`, not `named_parameters()`: the latter lists a tied lm_head only once (as the embedding), and a
    server that keeps lm_head as its own tensor (vLLM on CPU in fp32) would keep serving the old one. Name mapping
    as in verifiers' RLTrainer.update_vllm (verifiers/rl/trainer/trainer.py). Plain models yield their own
    (detached) tensors: copy them if they must outlive an optimizer step.
    """
    if not is_peft_model(model):
        for name, tensor in model.state_dict().items():
            yield name, tensor.detach()
        return
    for name, tensor in model.state_dict().items():
        if model.prefix in name or "original_module" in name:
            continue  # the LoRA factors themselves, and modules_to_save's frozen originals
        served = name.removeprefix("base_model.model.").replace(".base_layer", "")
        served = served.replace("modules_to_save.default.", "")
        if ".base_layer." in name:
            layer = model.get_submodule(name.split(".base_layer.")[0])
            if isinstance(layer, LoraLayer) and name.endswith(".base_layer.weight"):
                yield served, _merged_lora_weight(layer, tensor)
                continue
        yield served, tensor.detach()


def policy_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """`served_tensors` as a dict of copies (the CPU transport writes them to a file after the call returns)."""
    return {name: tensor.clone() for name, tensor in served_tensors(model)}
