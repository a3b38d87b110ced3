"""vf-musique survives any model output (issue 21): the hand-written corpus and generated replies through complete
rollouts with rlvr.testing's scripted client, no model server. RLVR_FUZZ=long runs thousands (README, "Robustness")."""

from __future__ import annotations

import json
from functools import cache

from hypothesis import HealthCheck, given, settings
from vf_musique import load_environment

from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

MAX_TURNS = 3
# README "Rewards": outcome hops/2 x (answer F1 + 0.5 x citation F1), at most 2 x 1.5 for a 4-hop question; a turn
# earns turn_weight (0.5) x the share of supporting paragraphs it newly retrieves, so a rollout at most 0.5.
BOUNDS = Bounds(reward=(0.0, 3.0), turn_reward=(0.0, 0.5), turn_total=(0.0, 0.5), rollout_s=30, scoring_s=30)


@cache
def environment():
    # one evaluation question (4 hops), so that every group asks it and the valid moves below fit it
    return load_environment(hops=(4,), max_turns=MAX_TURNS, num_train_examples=2, num_eval_examples=1)


def good_replies() -> tuple[Reply, ...]:
    info = environment().eval_dataset[0]["info"]
    supporting = [p for p in info["paragraphs"] if p["is_supporting"]]
    searches = tuple(Reply("", (("retrieve_documents", json.dumps({"query": p["title"]})),), label="a search")
                     for p in supporting[:2])
    answer = environment().eval_dataset[0]["answer"]
    cited = ", ".join(str(p["idx"]) for p in supporting)
    return (*searches, Reply(f"<answer>{answer}</answer>\n<citations>{cited}</citations>", label="the answer"))


SURFACE = Surface(tags=("reasoning", "answer", "citations"), tools={"retrieve_documents": {"query": "Ada Lovelace"}},
                  good=good_replies())


def test_fuzz_corpus():
    scripts = corpus.scripts(SURFACE, MAX_TURNS, random_scripts=fuzz.random_scripts(fast=40))
    report = check_environment(environment(), scripts, BOUNDS, probe=[list(SURFACE.good)], name="vf-musique")
    assert report.rollouts == len(scripts) and report.errors == {}
    assert set(report.stop_conditions) == {"max_turns_reached", "no_tools_called"}
    assert report.max_turn_total > 0 and report.reward_range[1] > 0  # the valid moves earn rewards


def test_fuzz_generated():
    @settings(max_examples=fuzz.hypothesis_examples(fast=15), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.scripts(SURFACE, MAX_TURNS))
    def run(script):
        check_environment(environment(), [script], BOUNDS, name="vf-musique/generated")

    run()
