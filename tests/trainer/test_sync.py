"""The state dict sent to the server: checkpoint names, tied lm_head included, LoRA merged."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from rlvr.trainer.policy import policy_state_dict


def test_plain_model_sends_every_checkpoint_tensor_including_the_tied_head(tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    state = policy_state_dict(model)
    assert set(state) == set(model.state_dict()) and "lm_head.weight" in state
    assert state["lm_head.weight"].data_ptr() != model.lm_head.weight.data_ptr()  # a copy, safe to serialise


def test_lora_is_merged_under_the_base_names(tiny_model):
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    names = set(base.state_dict())
    q_before = base.model.layers[0].self_attn.q_proj.weight.detach().clone()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"]))
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.fill_(0.01)  # B starts at 0; make the adapter non-trivial
    state = policy_state_dict(model)
    assert set(state) == names
    # W' = W + (alpha / r) * B A  (LoRA, Hu et al. 2021, Eq. 3 with the alpha/r scaling of Sec. 4.1)
    delta = (8 / 4) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(state["model.layers.0.self_attn.q_proj.weight"], q_before + delta)
    torch.testing.assert_close(layer.base_layer.weight, q_before)  # unmerged again afterwards
