"""The packed token view of one rollout and the reasons it is refused."""

from __future__ import annotations

import pytest

from rlvr.credit import NotPrefixConsistent, build_token_view, prefix_mismatch


def step(prompt, completion, advantage, mask=None, logprobs=None):
    tokens = {"prompt_ids": prompt, "completion_ids": completion}
    if mask is not None:
        tokens["completion_mask"] = mask
    if logprobs is not None:
        tokens["completion_logprobs"] = logprobs
    return {"tokens": tokens, "advantage": advantage}


def test_consistent_history_packs_into_one_sequence_with_env_tokens_masked():
    # prompt 1 2 3 | turn 0: 4 5 | env reply: 6 7 | turn 1: 8
    steps = [step([1, 2, 3], [4, 5], 0.5, logprobs=[-0.1, -0.2]), step([1, 2, 3, 4, 5, 6, 7], [8], -1.0)]
    assert prefix_mismatch(steps) is None
    view = build_token_view(steps)
    assert view.input_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert view.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert view.advantages == [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, -1.0]
    assert view.turn_index == [-1, -1, -1, 0, 0, -1, -1, 1]
    assert view.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, 0.0]


def test_completion_mask_zeros_stay_out_of_the_loss():
    view = build_token_view([step([1], [2, 3], 2.0, mask=[1, 0])])
    assert view.loss_mask == [0, 1, 0]
    assert view.advantages == [0.0, 2.0, 0.0]
    assert view.turn_index == [-1, 0, -1]


@pytest.mark.parametrize(
    ("steps", "reason"),
    [
        ([step([1, 2], [3], 0.0), step([1, 9, 3, 4], [5], 0.0)], "step 1: prompt token 1 is 9 where step 0's prompt"),
        ([step([1, 2], [3], 0.0), step([1, 2], [5], 0.0)], "step 1: its prompt has 2 tokens, fewer than the 3"),
        ([step([1], [2], 0.0), {"tokens": None, "advantage": 0.0}], "step 1 has no token ids"),
        ([], "no steps"),
    ],
)
def test_inconsistent_histories_are_refused_with_the_reason(steps, reason):
    assert reason in prefix_mismatch(steps)
    with pytest.raises(NotPrefixConsistent, match=reason):
        build_token_view(steps)


def test_unscored_steps_are_refused():
    with pytest.raises(ValueError, match="step 0 has no advantage"):
        build_token_view([step([1], [2], None)])
