"""Packed trajectories vs per-step samples, and the split over processes and micro-batches."""

from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.trainer.batching import Sample, distribute, rollout_samples


def step(prompt, completion, advantage, logprobs=None):
    return {"tokens": {"prompt_ids": prompt, "prompt_mask": [0] * len(prompt), "completion_ids": completion,
                       "completion_mask": [1] * len(completion),
                       "completion_logprobs": logprobs or [-0.5] * len(completion)},
            "advantage": advantage}


def test_prefix_consistent_rollout_is_one_packed_sample():
    # turn 0: prompt [1 2], completion [3 4]; env reply [5]; turn 1: completion [6]
    steps = [step([1, 2], [3, 4], 0.5, [-0.1, -0.2]), step([1, 2, 3, 4, 5], [6], -1.0, [-0.3])]
    r = rollout_samples(steps)
    assert r.packed and r.reason is None and r.trajectory_tokens == 6
    (s,) = r.samples
    assert s.input_ids == [1, 2, 3, 4, 5, 6]
    assert s.loss_mask == [0, 0, 1, 1, 0, 1]  # prompt and the environment's token masked
    assert s.advantages == [0.0, 0.0, 0.5, 0.5, 0.0, -1.0]  # each turn's tokens carry their turn's advantage
    assert s.behavior_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, -0.3]


def test_inconsistent_history_falls_back_to_one_sample_per_step():
    # turn 1's prompt re-tokenised turn 0's completion ([3 4] became [7]): not a prefix
    steps = [step([1, 2], [3, 4], 0.5), step([1, 2, 7, 5], [6], -1.0)]
    r = rollout_samples(steps)
    assert not r.packed and "step 1" in r.reason
    assert [s.input_ids for s in r.samples] == [[1, 2, 3, 4], [1, 2, 7, 5, 6]]
    assert [s.loss_mask for s in r.samples] == [[0, 0, 1, 1], [0, 0, 0, 0, 1]]
    assert [s.advantages for s in r.samples] == [[0, 0, 0.5, 0.5], [0, 0, 0, 0, -1.0]]
    # forwarded 9 tokens for a 5-token trajectory
    assert sum(len(s) for s in r.samples) == 9 and r.trajectory_tokens == 5


def test_packing_disabled_and_steps_without_tokens():
    steps = [step([1, 2], [3], 1.0), step([1, 2, 3, 4], [5], 1.0)]
    assert not rollout_samples(steps, pack=False).packed
    missing = [{"tokens": None, "advantage": 1.0}]
    r = rollout_samples(missing)
    assert r.samples == [] and r.reason == "no step has token ids"


def test_distribute_balances_tokens_and_equalises_microbatch_counts():
    samples = [Sample([1] * n, [1] * n, [0.0] * n, [1.0] * n) for n in (9, 7, 5, 3, 2)]
    split = distribute(samples, num_processes=2, micro_batch_size=2, pad_token_id=0)
    # LPT: 9 -> p0, 7 -> p1, 5 -> p1 (12), 3 -> p0 (12), 2 -> p0 (14)
    assert [[len(s) for mb in p for s in mb] for p in split] == [[9, 3, 2], [7, 5, 2]]  # the last: a filler
    assert [len(p) for p in split] == [2, 2]  # both ranks run two backward passes
    filler = distribute(samples[:1], num_processes=2, micro_batch_size=2, pad_token_id=0)[1]
    assert filler == [[Sample([0, 0], [0, 0], [0.0, 0.0], [0.0, 0.0])]]  # fully masked: contributes no loss


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=1, max_size=30), st.integers(1, 4), st.integers(1, 5))
def test_distribute_keeps_every_sample_once(lengths, procs, micro):
    samples = [Sample([i] * n, [1] * n, [0.0] * n, [0.0] * n) for i, n in enumerate(lengths)]
    split = distribute(samples, procs, micro, pad_token_id=-1)
    real = [s for p in split for mb in p for s in mb if s.input_ids != [-1, -1]]
    assert sorted(map(tuple, (s.input_ids for s in real))) == sorted(tuple(s.input_ids) for s in samples)
    assert len({len(p) for p in split}) == 1 and all(1 <= len(mb) <= micro for p in split for mb in p)
