"""vf-triviaqa-search survives any model output, in every protocol (issue 21): the hand-written corpus and
generated replies through complete rollouts with rlvr.testing's scripted client, no model server.

Fast profile in `make test`; RLVR_FUZZ=long runs thousands of rollouts (see the README, "Robustness")."""

from __future__ import annotations

import json
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from vf_triviaqa_search import load_environment

from rlvr.data.factworld import FactWorld
from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

MAX_TURNS = 3  # one more than the default, so that repeated searches are tried
# Rewards as the README documents them: outcome 0.5 + 1.0 + 0.2 + 0.2; a turn earns 0.2 x the change of the
# tool-success ratio (in [-1, 1]) + 0.5 for the first search result holding the answer; a rollout at most 0.7.
BOUNDS = Bounds(reward=(0.0, 1.9), turn_reward=(-0.2, 0.7), turn_total=(0.0, 0.7), rollout_s=30, scoring_s=30)


@cache
def environment(protocol: str):
    # one evaluation question, so that every group asks it and the valid moves below find its answer
    return load_environment(protocol=protocol, max_turns=MAX_TURNS, num_train_examples=4, num_eval_examples=1)


FACTS = {q["question"]: q for q in FactWorld.generate(seed=0, num_entities=300).single_hop_questions(None)}
FACT = FACTS[environment("xml").eval_dataset[0]["question"]]


def xml_call(query: str) -> str:
    return '<reasoning>\nsearch\n</reasoning>\n<tool>' + json.dumps({"name": "wiki_search", "args": {"query": query}}) + "</tool>"


GOOD = {
    "xml": (Reply(xml_call(FACT["entity"]), label="an XML search"),
            Reply(f"<reasoning>\nok\n</reasoning>\n<answer>\n{FACT['answer']}\n</answer>", label="an answer")),
    "native": (Reply("", (("wiki_search", json.dumps({"query": FACT["entity"]})),), label="a native search"),
               Reply(f"<answer>{FACT['answer']}</answer>", label="an answer")),
    "search": (Reply(f"<search>{FACT['entity']}</search>", label="a search"),
               Reply(f"<answer>{FACT['answer']}</answer>", label="an answer")),
}
SURFACES = {
    "xml": Surface(tags=("reasoning", "tool", "answer"), json_tool_tag="tool",
                   tools={"wiki_search": {"query": "Ada Lovelace"}}, good=GOOD["xml"]),
    "native": Surface(tags=("reasoning", "answer"), tools={"wiki_search": {"query": "Ada Lovelace"}},
                      good=GOOD["native"]),
    "search": Surface(tags=("search", "answer"), good=GOOD["search"]),
}


@pytest.mark.parametrize("protocol", sorted(SURFACES))
def test_fuzz_corpus(protocol):
    scripts = corpus.scripts(SURFACES[protocol], MAX_TURNS, random_scripts=fuzz.random_scripts(fast=40))
    probe = [list(GOOD[protocol])]  # the oracle's search and answer: must score the same after the fuzz
    report = check_environment(environment(protocol), scripts, BOUNDS, probe=probe,
                               name=f"vf-triviaqa-search/{protocol}")
    assert report.rollouts == len(scripts) and report.errors == {}
    # the corpus reaches both ways a rollout ends, and the valid moves reach the top turn reward
    assert set(report.stop_conditions) == {"max_turns_reached", "answered" if protocol != "native" else "no_tools_called"}
    assert report.max_turn_total == pytest.approx(0.7)


@pytest.mark.parametrize("protocol", sorted(SURFACES))
def test_fuzz_generated(protocol):
    @settings(max_examples=fuzz.hypothesis_examples(fast=15), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.scripts(SURFACES[protocol], MAX_TURNS))
    def run(script):
        check_environment(environment(protocol), [script], BOUNDS, name=f"vf-triviaqa-search/{protocol}/generated")

    run()
