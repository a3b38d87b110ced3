"""vf-alfworld under rlvr.testing's fuzz harness (issue 21): whatever the policy writes, no exception escapes, no
rollout or scoring hangs, rewards stay in [0, 1] and turn rewards sum to at most 1, and the environment stays
usable. Both backends; `RLVR_FUZZ=long` runs thousands of scripts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from vf_alfworld import load_environment
from vf_alfworld.protocol import parse_action

from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

MAX_TURNS = 3
# "look" / "inventory" are valid in every game; repeating and alternating them must earn nothing
ALFWORLD = Surface(tags=("think", "action"), actions=("<action>{}</action>", "Action: {}"),
                   good=(Reply("<action>look</action>", label="look"),
                         Reply("<action>inventory</action>", label="inventory")))  # fmt: skip
TWC = Surface(tags=("think", "action"), actions=("<action>{}</action>", "Action: {}"),
              good=(Reply("<action>look around</action>", label="look around"),
                    Reply("<action>inventory</action>", label="inventory")))  # fmt: skip
# outcome: won (weight 1); turn rewards: sub-goal progress paid once per stage, so each turn and the sum lie in [0, 1]
BOUNDS = Bounds(reward=(0.0, 1.0), turn_reward=(0.0, 1.0), turn_total=(0.0, 1.0))


@pytest.fixture(scope="module")
def fuzz_env(game_cache):
    return load_environment(num_train_examples=0, num_eval_examples=4, max_turns=MAX_TURNS, max_receptacles=4,
                            max_distractors=2, cache_dir=game_cache)  # fmt: skip


@pytest.fixture(scope="module")
def fuzz_twc_env():
    return load_environment(backend="twc", num_train_examples=0, num_eval_examples=4, max_turns=MAX_TURNS)


def reaches_the_engine(script) -> bool:
    """Whether a script sends the game any command besides the known-good ones."""
    return any(reply not in ALFWORLD.good and parse_action(reply.content or "", "alfworld") for reply in script)


def test_fuzz_fast_twc(fuzz_twc_env):
    """The whole corpus on the fast engine: the protocol (parsing, replies, rewards) is the same for both backends."""
    scripts = corpus.scripts(TWC, max_turns=MAX_TURNS, random_scripts=fuzz.random_scripts(fast=20))
    report = check_environment(fuzz_twc_env, scripts, BOUNDS, probe=[[TWC.good[0]]], name="vf-alfworld (twc)")
    assert report.rollouts == len(scripts) and report.max_turn_total <= 1.0


def test_fuzz_fast_alfworld(fuzz_env):
    """ALFWorld's engine with every nasty command the corpus makes (a reply without an action never reaches it),
    and the known-good moves repeated and alternated."""
    scripts = corpus.scripts(ALFWORLD, max_turns=MAX_TURNS, random_scripts=fuzz.random_scripts(fast=0))
    scripts = [s for s in scripts if reaches_the_engine(s) or all(r in ALFWORLD.good for r in s)]
    report = check_environment(fuzz_env, scripts, BOUNDS, probe=[[ALFWORLD.good[0]]], name="vf-alfworld (alfworld)")
    assert report.rollouts == len(scripts) > 60 and report.max_turn_total <= 1.0


@settings(max_examples=fuzz.hypothesis_examples(fast=10), deadline=None)
@given(strategies.scripts(ALFWORLD, max_turns=MAX_TURNS))
def test_fuzz_generated(fuzz_env, script):
    check_environment(fuzz_env, [script], BOUNDS)
