"""The policy being trained: loading (dtype, LoRA), its reference model, per-token log-probabilities, and the
weights a rollout server should serve. Shared by every recipe (MT-GRPO, PPO's actor, OREO's policy)."""

from __future__ import annotations

import copy

import torch
from accelerate.utils import is_peft_model
from peft import PeftConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from verifiers.rl.trainer.utils import entropy_from_logits, prepare_peft_model, selective_log_softmax


def load_policy(model: str | PreTrainedModel, *, bf16: bool, tokenizer=None):
    """The trainable model and its tokenizer; a registered name ("tiny-random") resolves through rlvr.models."""
    if isinstance(model, PreTrainedModel):
        return model, tokenizer or AutoTokenizer.from_pretrained(model.config._name_or_path)
    from rlvr.models import resolve

    path = resolve(model)
    dtype = torch.bfloat16 if bf16 else torch.float32
    # sdpa, not verifiers' flash_attention_2 default: it runs on CPU and GPU alike.
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return policy, tokenizer


def with_lora(model: PreTrainedModel, lora_config: PeftConfig | None, args) -> PreTrainedModel:
    """Wrap the model in a LoRA adapter (verifiers' prepare_peft_model) when a config is given."""
    return prepare_peft_model(model, lora_config, args) if isinstance(lora_config, PeftConfig) else model


def frozen_reference(model: PreTrainedModel) -> PreTrainedModel:
    """A frozen copy of the initial policy: the KL reference of full fine-tuning (GRPO, DeepSeekMath Sec. 4.1).
    Under LoRA no copy is needed: the reference is the policy with its adapter disabled (`reference_logprobs`)."""
    return copy.deepcopy(model).eval().requires_grad_(False)


def token_logprobs(model, input_ids, attention_mask, keep, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (at the sampling temperature, as verifiers' RLTrainer.get_logprobs) and entropies of the
    tokens that follow positions `keep`. The LM head runs on those positions only (`logits_to_keep`): with a
    50k-token vocabulary it costs more than the whole small model, and prompt/environment positions need none."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep).logits
    logits = logits / temperature
    targets = input_ids[:, keep + 1]
    return selective_log_softmax(logits, targets), entropy_from_logits(logits.detach())


def reference_logprobs(model, ref_model, input_ids, attention_mask, keep, temperature: float) -> torch.Tensor:
    """The reference policy's log-probabilities: the frozen copy, or (LoRA) the policy with its adapter off."""
    with torch.no_grad():
        if ref_model is not None:
            return token_logprobs(ref_model, input_ids, attention_mask, keep, temperature)[0]
        with model.disable_adapter():
            return token_logprobs(model, input_ids, attention_mask, keep, temperature)[0]


def policy_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights a server should serve, under checkpoint names: LoRA merged into the base weights.

    `state_dict()`, not `named_parameters()`: the latter lists a tied lm_head only once (as the embedding), and a
    server that keeps lm_head as its own tensor (vLLM on CPU in fp32) would keep serving the old one. Name mapping
    as in verifiers' RLTrainer.update_vllm (verifiers/rl/trainer/trainer.py). Tensors are cloned: under LoRA they
    must outlive `unmerge_adapter`.
    """
    if not is_peft_model(model):
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    model.merge_adapter()
    try:
        for name, tensor in model.state_dict().items():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue  # the LoRA factors themselves, and modules_to_save's frozen originals
            state[name.replace("modules_to_save.default.", "")] = tensor.detach().clone()
    finally:
        model.unmerge_adapter()
    return state
