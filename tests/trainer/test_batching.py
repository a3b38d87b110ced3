"""Packed trajectories vs per-turn samples, and the split over processes and micro-batches."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.credit import TurnTokens
from rlvr.rollouts import Rollout, Turn
from rlvr.trainer.batching import Sample, moving_samples, rollout_samples, split_batch


def turn(prompt, completion, logprobs=None):
    tokens = TurnTokens(tuple(prompt), tuple(completion), tuple(logprobs or [-0.5] * len(completion)),
                        (1,) * len(completion))
    return Turn(reward=0.0, reward_parts={}, tool_result=False, state_key=None, tokens=tokens)


def rollout(turns, advantages):
    return Rollout(example_id=0, task="t", prompt=[], completion=[], answer="", outcome=0.0, metrics={},
                   turns=tuple(turns), advantages=None if advantages is None else tuple(advantages))


def sample(n: int, token: int = 1) -> Sample:
    return Sample([token] * n, [1] * n, [0.0] * n, [1.0] * n, [0] * n)


def test_prefix_consistent_rollout_is_one_packed_sample():
    # turn 0: prompt [1 2], completion [3 4]; env reply [5]; turn 1: completion [6]
    r = rollout_samples(rollout([turn([1, 2], [3, 4], [-0.1, -0.2]), turn([1, 2, 3, 4, 5], [6], [-0.3])], [0.5, -1.0]))
    assert r.packed and r.reason is None and r.trajectory_tokens == 6
    (s,) = r.samples
    assert s.input_ids == [1, 2, 3, 4, 5, 6]
    assert s.loss_mask == [0, 0, 1, 1, 0, 1]  # prompt and the environment's token masked
    assert s.advantages == [0.0, 0.0, 0.5, 0.5, 0.0, -1.0]  # each turn's tokens carry their turn's advantage
    assert s.behavior_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, -0.3]
    assert s.turn_index == [-1, -1, 0, 0, -1, 1]


def test_inconsistent_history_falls_back_to_one_sample_per_turn():
    # turn 1's prompt re-tokenised turn 0's completion ([3 4] became [7]): not a prefix
    r = rollout_samples(rollout([turn([1, 2], [3, 4]), turn([1, 2, 7, 5], [6])], [0.5, -1.0]))
    assert not r.packed and "turn 1" in r.reason
    assert [s.input_ids for s in r.samples] == [[1, 2, 3, 4], [1, 2, 7, 5, 6]]
    assert [s.loss_mask for s in r.samples] == [[0, 0, 1, 1], [0, 0, 0, 0, 1]]
    assert [s.advantages for s in r.samples] == [[0, 0, 0.5, 0.5], [0, 0, 0, 0, -1.0]]
    assert [s.turn_index for s in r.samples] == [[-1, -1, 0, 0], [-1, -1, -1, -1, 1]]  # turns keep their number
    # forwarded 9 tokens for a 5-token trajectory
    assert sum(len(s) for s in r.samples) == 9 and r.trajectory_tokens == 5


def test_packing_disabled_turns_without_tokens_and_missing_advantages():
    turns = [turn([1, 2], [3]), turn([1, 2, 3, 4], [5])]
    assert not rollout_samples(rollout(turns, [1.0, 1.0]), pack=False).packed
    untokenised = Turn(reward=0.0, reward_parts={}, tool_result=False, state_key=None, tokens=None)
    r = rollout_samples(rollout([untokenised], [1.0]))
    assert r.samples == [] and r.reason == "no turn has token ids"
    with pytest.raises(ValueError, match="assign credit before batching"):
        rollout_samples(rollout(turns, None))


def test_split_balances_tokens_and_equalises_microbatch_counts():
    samples = [sample(n) for n in (9, 7, 5, 3, 2)]
    split = split_batch(samples, num_processes=2, pad_token_id=0, max_samples=2)
    # LPT: 9 -> p0, 7 -> p1, 5 -> p1 (12), 3 -> p0 (12), 2 -> p0 (14)
    assert [[len(s) for mb in p for s in mb] for p in split] == [[9, 3, 2], [7, 5, 2]]  # the last: a filler
    assert [len(p) for p in split] == [2, 2]  # both ranks run two backward passes
    filler = split_batch(samples[:1], num_processes=2, pad_token_id=0, max_samples=2)[1]
    assert filler == [[Sample([0, 0], [0, 0], [0.0, 0.0], [0.0, 0.0], [-1, -1])]]  # fully masked: no loss


def test_a_token_budget_fills_micro_batches_by_padded_tokens():
    samples = [sample(n) for n in (10, 6, 5, 4, 3, 12)]
    split = split_batch(samples, num_processes=1, pad_token_id=0, max_tokens=12)
    # longest first: [12] (12 tokens), [10] (2 x 10 = 20 > 12), [6, 5] (2 x 6 = 12), [4, 3] (2 x 4 = 8; 3 x 4 = 12
    # would fit, but only two samples are left)
    assert [[len(s) for s in mb] for mb in split[0]] == [[12], [10], [6, 5], [4, 3]]
    both = split_batch(samples, num_processes=1, pad_token_id=0, max_tokens=100, max_samples=2)
    assert [[len(s) for s in mb] for mb in both[0]] == [[12, 10], [6, 5], [4, 3]]
    with pytest.raises(ValueError, match="give max_samples, max_tokens or both"):
        split_batch(samples, num_processes=1, pad_token_id=0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(1, 4), st.integers(1, 5),
       st.one_of(st.none(), st.integers(2, 120)))
def test_split_keeps_every_sample_once_within_its_limits(lengths, procs, micro, budget):
    samples = [sample(n, token=i) for i, n in enumerate(lengths)]
    split = split_batch(samples, procs, pad_token_id=-1, max_samples=micro, max_tokens=budget)
    real = [s for p in split for mb in p for s in mb if s.input_ids != [-1, -1]]
    assert sorted(map(tuple, (s.input_ids for s in real))) == sorted(tuple(s.input_ids) for s in samples)
    assert len({len(p) for p in split}) == 1 and all(1 <= len(mb) <= micro for p in split for mb in p)
    if budget is not None:  # a micro-batch over the budget holds a single sample that alone exceeds it
        assert all(len(mb) * max(map(len, mb)) <= budget or len(mb) == 1 for p in split for mb in p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from([0.0, 0.0, 1.5, -0.5]), min_size=1, max_size=6),
                          st.lists(st.booleans(), min_size=6, max_size=6), st.booleans()), max_size=8))
def test_moving_samples_keep_exactly_those_with_a_trained_nonzero_advantage_logged_or_not(specs):
    samples = []
    for advantages, mask, logged in specs:
        n = len(advantages)
        samples.append(Sample([1] * n, [int(m) for m in mask[:n]], [0.0] * n, advantages, [0] * n,
                              log_key=(len(samples), 0) if logged else None))
    kept = moving_samples(samples)
    expected = [s for s in samples if any(a != 0.0 and m for a, m in zip(s.advantages, s.loss_mask, strict=True))]
    assert [id(s) for s in kept] == [id(s) for s in expected]  # in order, each once


def test_an_untrained_nonzero_advantage_does_not_make_a_sample_move():
    still = Sample([1, 2, 3], [0, 1, 1], [0.0] * 3, [7.0, 0.0, 0.0], [-1, 0, 0])  # the 7 sits on a prompt token
    moving = Sample([1, 2, 3], [0, 1, 1], [0.0] * 3, [0.0, 0.0, -0.25], [-1, 0, 0])
    assert moving_samples([still, moving]) == [moving]
