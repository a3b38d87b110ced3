"""vf-webshop survives any model output (issue 21): actions with empty, huge or unclosed arguments, many actions in
one reply, repeated and alternated moves (trying to farm turn rewards), and generated replies, through complete
rollouts with rlvr.testing's scripted client. RLVR_FUZZ=long runs thousands (README, "Robustness")."""

from __future__ import annotations

import json
from functools import cache

from hypothesis import HealthCheck, given, settings
from vf_webshop import load_environment

from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

MAX_TURNS = 8 if fuzz.long_profile() else 4
# README "Rewards": the purchase reward in [0, 1]; turn weights 0 (valid_action), 0.1 (search_hit), 0.1
# (target_click), the last two paid at most once per rollout: a turn at most 0.1, a rollout at most 0.2.
BOUNDS = Bounds(reward=(0.0, 1.0), turn_reward=(0.0, 0.1), turn_total=(0.0, 0.2), rollout_s=30, scoring_s=30)


@cache
def environment():
    return load_environment(max_turns=MAX_TURNS, num_eval_examples=1)


def good_replies() -> tuple[Reply, ...]:
    goal = json.loads(environment().eval_dataset[0]["info"])["goal"]
    moves = [f"search[{goal['name']}]", f"click[{goal['asin']}]", "click[Back to Search]", "click[Next >]",
             "click[< Prev]", "click[Buy Now]", "click[Description]"]
    return tuple(Reply(f"Thought: go.\nAction: {move}", label=move) for move in moves)


SURFACE = Surface(actions=("search[{}]", "click[{}]"), good=good_replies())


def test_fuzz_corpus():
    purchase = [SURFACE.good[0], SURFACE.good[1], SURFACE.good[5]]  # search the goal, open its product, buy
    scripts = corpus.scripts(SURFACE, MAX_TURNS, random_scripts=fuzz.random_scripts(fast=20)) + [purchase]
    probe = [purchase]
    report = check_environment(environment(), scripts, BOUNDS, probe=probe, name="vf-webshop")
    assert report.rollouts == len(scripts) and report.errors == {}
    assert set(report.stop_conditions) == {"max_turns_reached", "has_final_env_response"}
    assert report.max_turn_total == 0.2 and report.reward_range[1] > 0


def test_fuzz_generated():
    @settings(max_examples=fuzz.hypothesis_examples(fast=15), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.scripts(SURFACE, MAX_TURNS))
    def run(script):
        check_environment(environment(), [script], BOUNDS, name="vf-webshop/generated")

    run()
