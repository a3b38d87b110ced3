"""Dynamic sampling: a training batch of groups whose outcomes differ (pure functions; the loop is
`OnPolicyTrainer.generate_batch`).

DAPO (Yu et al., arXiv 2503.14476, Sec. 3.2 "Dynamic Sampling", Eq. 11's constraint 0 < |{o_i equivalent to a}| < G):
a group whose rollouts all got the same outcome has a group-normalised advantage of 0 on every token, so it adds
nothing to the policy gradient while its tokens still count in the batch's loss denominator (the update shrinks as
more groups are uniform). DAPO over-samples and keeps only groups with spread until the batch is full; verl's recipe
(recipe/dapo/dapo_ray_trainer.py, `algorithm.filter_groups`) draws further generation batches until it has
`train_batch_size` such prompts, at most `max_num_gen_batches` times. Here each further round rolls out as many new
prompts as a batch has, chosen by a seeded permutation of the dataset (a pure function of the run's seed, the batch
and the round, so a resumed run regenerates the same batch) and sampled with seeds of their own (`round_seed_batch`).

By default the filter reads the rollout's outcome (the rubric's rollout-level reward), as DAPO's does; then a
turn-level estimator loses the groups whose only spread is in their turn rewards, which do train it.
`filter_groups_by = "advantage"` keeps what the recipe's own credit gives a non-zero advantage on some turn (for
GRPO-OR the same groups), so a comparison of estimators under dynamic sampling drops for each only what it cannot
learn from (`OnPolicyTrainer.group_has_spread`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Sequence

from rlvr.rollouts import Rollout, group_by_example
from rlvr.seeding import derived_seed
from rlvr.trainer.rollout_client import GeneratedBatch

ROUND_STRIDE = 2**32  # no run has 2**32 batches, so round k >= 1 of batch b seeds like no batch of the run


def round_seed_batch(batch: int, generation_round: int) -> int:
    """The `batch` number the sampling seeds of round `generation_round` (0: the batch's own prompts) of training
    batch `batch` are derived from (rlvr.seeding.request_seed): round 0 is the batch itself, later rounds differ
    from every batch and from each other."""
    return batch + generation_round * ROUND_STRIDE


def outcome_spread(group: Sequence[Rollout]) -> bool:
    """DAPO's criterion: the group's rollouts did not all get the same outcome."""
    return len({r.outcome for r in group}) > 1


def advantage_spread(credited: Sequence[Rollout]) -> bool:
    """A group after credit assignment (`Rollout.advantages`) has some turn with a non-zero advantage."""
    return any(a != 0 for r in credited for a in r.advantages or ())


HasSpread = Callable[[Sequence[Rollout]], bool]


def groups_with_spread(rollouts: Sequence[Rollout],
                       has_spread: HasSpread = outcome_spread) -> tuple[list[list[Rollout]], int]:
    """The groups (`group_by_example`, in order) that `has_spread` keeps (by default: whose rollouts' outcomes are
    not all equal), and how many groups were dropped."""
    groups = group_by_example(rollouts)
    spread = [g for g in groups if has_spread(g)]
    return spread, len(groups) - len(spread)


def extra_prompt_positions(example_ids: Sequence[int], used: Collection[int], count: int, *, seed: int, batch: int,
                           generation_round: int) -> list[int]:
    """Dataset positions of up to `count` prompts for round `generation_round` of batch `batch`: a permutation of
    the positions seeded by (seed, batch, round), skipping examples the batch already rolled out (`used`), so no
    group of the batch shares an example id with another (credit groups rollouts by example id)."""
    if count <= 0:
        return []
    order = list(range(len(example_ids)))
    random.Random(derived_seed(seed, batch, generation_round)).shuffle(order)
    chosen, taken = [], set(used)
    for position in order:
        if example_ids[position] not in taken:
            chosen.append(position)
            taken.add(example_ids[position])
            if len(chosen) == count:
                break
    return chosen


def batch_with_spread(first: GeneratedBatch, roll_more: Callable[[int, set[int]], GeneratedBatch | None], groups: int,
                      max_rounds: int, has_spread: HasSpread = outcome_spread) -> GeneratedBatch:
    """The batch's first `groups` groups with spread (`has_spread`): those of `first` (round 0, the batch's own prompts),
    then of `roll_more(round, example ids rolled out so far)` for rounds 1, 2, ... until there are `groups` of
    them, `max_rounds` rounds were rolled out, or `roll_more` has no prompt left (None). A batch without any such
    group is `first` as generated (its advantages are all 0: the trainer skips it)."""
    kept, dropped = groups_with_spread(first.rollouts, has_spread)
    used = {r.example_id for r in first.rollouts}
    generation_s, scoring_s, rounds = first.generation_s, first.scoring_s, 1
    while len(kept) < groups and rounds < max_rounds:
        more = roll_more(rounds, used)
        if more is None:
            break
        spread, uniform = groups_with_spread(more.rollouts, has_spread)
        kept, dropped, rounds = kept + spread, dropped + uniform, rounds + 1
        used |= {r.example_id for r in more.rollouts}
        generation_s, scoring_s = generation_s + more.generation_s, scoring_s + more.scoring_s
    rollouts = [r for group in kept[:groups] for r in group] if kept else first.rollouts
    return GeneratedBatch(rollouts, generation_s, scoring_s, generation_rounds=rounds, dropped_groups=dropped)
