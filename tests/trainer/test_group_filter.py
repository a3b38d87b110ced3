"""Dynamic sampling (rlvr.trainer.group_filter): which groups a batch keeps, which prompts later rounds roll out, and
the loop that fills a batch, on scored rollout records; the trainer's use of it on a real server is in
test_training.py (filter_groups)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from train_script import config, ppo_config

from rlvr.rollouts import Rollout, Turn, assign_advantages
from rlvr.trainer.config import ConfigError
from rlvr.trainer.group_filter import (
    ROUND_STRIDE,
    advantage_spread,
    batch_with_spread,
    extra_prompt_positions,
    groups_with_spread,
    outcome_spread,
    round_seed_batch,
)
from rlvr.trainer.rollout_client import GeneratedBatch


def scored(example_id: int, outcome: float) -> Rollout:
    return Rollout(example_id=example_id, task="t", prompt=[], completion=[], answer="", outcome=outcome, metrics={},
                   turns=())


def batch(outcomes: dict[int, list[float]], seconds: float = 1.0) -> GeneratedBatch:
    return GeneratedBatch([scored(e, o) for e, values in outcomes.items() for o in values], seconds, seconds / 10)


def outcomes_of(rollouts) -> dict[int, list[float]]:
    found: dict[int, list[float]] = {}
    for r in rollouts:
        found.setdefault(r.example_id, []).append(r.outcome)
    return found


def test_groups_whose_outcomes_all_agree_are_dropped():
    rollouts = batch({3: [1, 1, 1], 5: [0, 1, 0], 7: [0, 0, 0], 2: [0.5, 0.25, 0.5]}).rollouts
    kept, dropped = groups_with_spread(rollouts)
    assert outcomes_of(r for group in kept for r in group) == {5: [0, 1, 0], 2: [0.5, 0.25, 0.5]} and dropped == 2
    assert [r.example_id for r in kept[0]] == [5, 5, 5]  # in order of first appearance


def test_a_batch_is_filled_from_later_rounds_in_order_and_trimmed():
    first = batch({0: [1, 1], 1: [0, 1]})
    later = {1: batch({8: [0, 0], 9: [1, 0]}, 2.0), 2: batch({4: [0, 1], 6: [1, 0]}, 3.0)}
    asked = []

    def roll_more(generation_round, used):
        asked.append((generation_round, sorted(used)))
        return later[generation_round]

    filled = batch_with_spread(first, roll_more, groups=3, max_rounds=4)
    # round 0 keeps 1, round 1 keeps 9, round 2 keeps 4 and 6: the first three with spread, in order
    assert outcomes_of(filled.rollouts) == {1: [0, 1], 9: [1, 0], 4: [0, 1]}
    assert asked == [(1, [0, 1]), (2, [0, 1, 8, 9])]  # each round knows every example rolled out before it
    assert (filled.generation_rounds, filled.dropped_groups) == (3, 2)
    assert filled.generation_s == pytest.approx(6.0) and filled.scoring_s == pytest.approx(0.6)


def test_rounds_stop_at_the_limit_or_when_no_prompt_is_left():
    first = batch({0: [1, 1], 1: [0, 1]})
    capped = batch_with_spread(first, lambda r, used: batch({10 + r: [0, 0]}), groups=2, max_rounds=3)
    assert outcomes_of(capped.rollouts) == {1: [0, 1]} and (capped.generation_rounds, capped.dropped_groups) == (3, 3)
    exhausted = batch_with_spread(first, lambda r, used: None, groups=2, max_rounds=3)
    assert outcomes_of(exhausted.rollouts) == {1: [0, 1]} and exhausted.generation_rounds == 1
    one_round = batch_with_spread(first, lambda r, used: pytest.fail("no second round"), groups=2, max_rounds=1)
    assert outcomes_of(one_round.rollouts) == {1: [0, 1]}


def test_a_batch_without_any_spread_is_trained_as_generated():
    first = batch({0: [1, 1], 1: [0, 0]})
    filled = batch_with_spread(first, lambda r, used: batch({5: [1, 1]}), groups=2, max_rounds=2)
    assert filled.rollouts == first.rollouts and (filled.generation_rounds, filled.dropped_groups) == (2, 3)


def test_extra_prompts_skip_what_the_batch_has_and_depend_only_on_seed_batch_and_round():
    ids = [10, 11, 12, 13, 14, 15]
    chosen = extra_prompt_positions(ids, {11, 14}, 3, seed=7, batch=2, generation_round=1)
    assert len(chosen) == 3 and not {ids[p] for p in chosen} & {11, 14}
    assert chosen == extra_prompt_positions(ids, {11, 14}, 3, seed=7, batch=2, generation_round=1)  # a resume
    others = {tuple(extra_prompt_positions(ids, set(), 6, seed=7, batch=b, generation_round=r)) for b, r in
              [(2, 1), (2, 2), (3, 1)]}
    assert len(others) == 3  # another batch or round draws another order
    assert extra_prompt_positions(ids, set(ids) - {13}, 3, seed=7, batch=2, generation_round=1) == [3]
    assert extra_prompt_positions(ids, set(ids), 3, seed=7, batch=2, generation_round=1) == []


@given(st.lists(st.integers(0, 40), max_size=30, unique=True), st.sets(st.integers(0, 40)), st.integers(0, 10),
       st.integers(0, 5), st.integers(1, 5))
def test_extra_prompts_are_distinct_new_and_as_many_as_there_are(ids, used, count, batch_index, generation_round):
    chosen = extra_prompt_positions(ids, used, count, seed=0, batch=batch_index, generation_round=generation_round)
    new = [e for e in ids if e not in used]
    assert len(chosen) == min(count, len(new)) == len(set(chosen))
    assert all(ids[p] not in used for p in chosen)


def test_later_rounds_seed_like_no_batch_of_the_run():
    assert round_seed_batch(5, 0) == 5
    assert round_seed_batch(5, 1) == 5 + ROUND_STRIDE != round_seed_batch(6, 1)
    assert len({round_seed_batch(b, r) for b in range(50) for r in range(4)}) == 200


def test_max_generation_rounds_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="max_generation_rounds=0 must be >= 1"):
        config(str(tmp_path), 1, filter_groups=True, max_generation_rounds=0)


def two_turns(example_id: int, outcome: float, first_turn_reward: float) -> Rollout:
    """A rollout whose first turn got a tool result and the turn reward `first_turn_reward` (MT-GRPO's split)."""
    turns = tuple(Turn(reward=r, reward_parts={}, tool_result=k == 0, state_key=None, tokens=None)
                  for k, r in enumerate((first_turn_reward, 0.0)))
    return Rollout(example_id=example_id, task="t", prompt=[], completion=[], answer="", outcome=outcome, metrics={},
                   turns=turns)


def test_by_advantage_a_turn_level_estimator_keeps_the_groups_its_turn_rewards_separate():
    """Both rollouts won, one searched well: no outcome spread (DAPO drops it, and GRPO-OR has nothing to learn),
    but MT-GRPO-K's first-turn advantages differ, so filter_groups_by = "advantage" keeps it for MT-GRPO-K only."""
    same_outcome = [two_turns(1, 1.0, 1.0), two_turns(1, 1.0, 0.0)]
    assert not outcome_spread(same_outcome)
    assert advantage_spread(assign_advantages(same_outcome, "mt_grpo_k", {}))
    assert not advantage_spread(assign_advantages(same_outcome, "grpo", {}))
    uniform = [two_turns(2, 0.0, 0.0), two_turns(2, 0.0, 0.0)]
    assert not advantage_spread(assign_advantages(uniform, "mt_grpo_k", {}))
    by_mt_grpo_k = lambda g: advantage_spread(assign_advantages(g, "mt_grpo_k", {}))  # noqa: E731
    kept, dropped = groups_with_spread(same_outcome + uniform, by_mt_grpo_k)
    assert [g[0].example_id for g in kept] == [1] and dropped == 1
    filled = batch_with_spread(GeneratedBatch(uniform, 1.0, 0.1), lambda r, used: GeneratedBatch(same_outcome, 1.0, 0.1),
                               groups=1, max_rounds=2, has_spread=by_mt_grpo_k)
    assert filled.rollouts == same_outcome and (filled.generation_rounds, filled.dropped_groups) == (2, 1)


@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=2, max_size=8))
def test_for_grpo_or_the_advantage_filter_is_the_outcome_filter(outcomes):
    group = [two_turns(0, o, 0.0) for o in outcomes]
    assert advantage_spread(assign_advantages(group, "grpo", {})) == outcome_spread(group)


def test_filter_groups_by_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="filter_groups_by='turn' must be 'outcome'"):
        config(str(tmp_path), 1, filter_groups=True, filter_groups_by="turn")
    with pytest.raises(ConfigError, match="PPO's come from its critic at training time: use filter_groups_by='outcome'"):
        ppo_config(str(tmp_path), 1, filter_groups=True, filter_groups_by="advantage")
