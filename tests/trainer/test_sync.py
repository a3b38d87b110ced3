"""The weights sent to the server: checkpoint names, tied lm_head included, LoRA merged out of place."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from rlvr.trainer.policy import served_tensors


def test_plain_model_sends_every_checkpoint_tensor_including_the_tied_head(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    state = dict(served_tensors(model))
    assert set(state) == set(model.state_dict()) and "lm_head.weight" in state
    assert all(not t.requires_grad for t in state.values())


def lora_model(tiny_model, dtype):
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=dtype)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.normal_(0, 0.01)  # B starts at 0; make the adapter non-trivial
    return model, layer


def test_lora_is_merged_under_the_base_names(tiny_model):
    names = set(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).state_dict())
    model, layer = lora_model(tiny_model, torch.float32)
    q_before = layer.base_layer.weight.detach().clone()
    state = dict(served_tensors(model))
    assert set(state) == names
    # W' = W + (alpha / r) * B A  (LoRA, Hu et al. 2021, Eq. 3 with the alpha/r scaling of Sec. 4.1)
    delta = (8 / 4) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(state["model.layers.0.self_attn.q_proj.weight"], q_before + delta)
    torch.testing.assert_close(layer.base_layer.weight, q_before)


def test_lora_sync_leaves_a_bf16_base_bit_identical(tiny_model):
    # peft's merge_adapter / unmerge_adapter add and subtract the delta in place: in bf16 every round trip rounds,
    # and the frozen base (the adapter-disabled reference) drifts (7.4e-5 rms after 100 syncs in review).
    model, layer = lora_model(tiny_model, torch.bfloat16)
    base_before = layer.base_layer.weight.detach().clone()
    delta = (8 / 4) * (layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float())
    for _ in range(20):
        state = dict(served_tensors(model))
    assert torch.equal(layer.base_layer.weight, base_before)
    merged = state["model.layers.0.self_attn.q_proj.weight"]
    assert merged.dtype == torch.bfloat16
    torch.testing.assert_close(merged, (base_before.float() + delta).to(torch.bfloat16), rtol=0, atol=0)
    assert not torch.equal(merged, base_before)  # the adapter did change what is served
