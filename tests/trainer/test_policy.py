"""Per-token log-probabilities computed over the vocabulary in chunks: the same values and gradients as the whole
log-softmax, and a refusal for models whose logits are more than the LM head of the last hidden state."""

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma2Config, Gemma2ForCausalLM

from rlvr.trainer.policy import check_head_reads_last_hidden_state, token_logprobs


def reference(model, input_ids, keep, temperature):
    """The unchunked computation: full logits, log-softmax, gather."""
    logits = model(input_ids=input_ids).logits[:, keep].float() / temperature
    return logits.log_softmax(-1).gather(-1, input_ids[:, keep + 1, None])[..., 0]


@pytest.mark.parametrize("chunk_tokens", [1, 7, 100_000])
def test_chunked_logprobs_and_gradients_equal_the_whole_log_softmax(tiny_model, chunk_tokens):
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    input_ids = torch.randint(0, model.config.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([2, 3, 5, 8, 10])
    mask = torch.ones(3, 12, dtype=torch.long)
    ours, entropy = token_logprobs(model, input_ids, mask, keep, 0.7, chunk_tokens)
    ours.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    expected = reference(model, input_ids, keep, 0.7)
    expected.sum().backward()
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():  # float32 sums in another order: equal to 1e-4 of the largest entry
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-3, atol=1e-4 * float(p.grad.abs().max()))
    assert ours.shape == entropy.shape == (3, 5) and not entropy.requires_grad
    # the entropy of a distribution over V tokens lies in [0, log V]
    assert (entropy >= 0).all() and (entropy <= torch.log(torch.tensor(float(model.config.vocab_size)))).all()


def test_a_model_that_soft_caps_its_logits_is_refused():
    config = Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=1.0)
    with pytest.raises(ValueError, match="Gemma2ForCausalLM.*does not give the model's logits.*soft-capping"):
        check_head_reads_last_hidden_state(Gemma2ForCausalLM(config), torch.device("cpu"))
    config.final_logit_softcapping = None
    check_head_reads_last_hidden_state(Gemma2ForCausalLM(config), torch.device("cpu"))
