"""The packed token view of one rollout and the reasons it is refused."""

from __future__ import annotations

import pytest

from rlvr.credit import NotPrefixConsistent, TurnTokens, build_token_view, prefix_mismatch


def turn(prompt, completion, mask=None, logprobs=None):
    return TurnTokens(tuple(prompt), tuple(completion), tuple(logprobs or [0.0] * len(completion)),
                      tuple(mask or [1] * len(completion)))


def test_consistent_history_packs_into_one_sequence_with_env_tokens_masked():
    # prompt 1 2 3 | turn 0: 4 5 | env reply: 6 7 | turn 1: 8
    turns = [turn([1, 2, 3], [4, 5], logprobs=[-0.1, -0.2]), turn([1, 2, 3, 4, 5, 6, 7], [8])]
    assert prefix_mismatch(turns) is None
    view = build_token_view(turns, [0.5, -1.0])
    assert view.input_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert view.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    assert view.advantages == [0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, -1.0]
    assert view.turn_index == [-1, -1, -1, 0, 0, -1, -1, 1]
    assert view.logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, 0.0]


def test_completion_mask_zeros_stay_out_of_the_loss():
    view = build_token_view([turn([1], [2, 3], mask=[1, 0])], [2.0])
    assert view.loss_mask == [0, 1, 0]
    assert view.advantages == [0.0, 2.0, 0.0]
    assert view.turn_index == [-1, 0, -1]


@pytest.mark.parametrize(
    ("turns", "reason"),
    [
        ([turn([1, 2], [3]), turn([1, 9, 3, 4], [5])], "turn 1: prompt token 1 is 9 where turn 0's prompt"),
        ([turn([1, 2], [3]), turn([1, 2], [5])], "turn 1: its prompt has 2 tokens, fewer than the 3"),
        ([turn([1], [2]), None], "turn 1 has no token ids"),
        ([], "no assistant turn"),
    ],
)
def test_inconsistent_histories_are_refused_with_the_reason(turns, reason):
    assert reason in prefix_mismatch(turns)
    with pytest.raises(NotPrefixConsistent, match=reason):
        build_token_view(turns, [0.0] * len(turns))


def test_one_advantage_per_turn_and_one_mask_entry_per_token_are_required():
    with pytest.raises(ValueError, match="1 advantages for 2 turns"):
        build_token_view([turn([1], [2]), turn([1, 2], [3])], [0.0])
    with pytest.raises(ValueError, match="2 completion ids but 1 mask entries"):
        TurnTokens((1,), (2, 3), (0.0, 0.0), (1,))
