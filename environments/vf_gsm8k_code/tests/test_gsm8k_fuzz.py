"""vf-gsm8k-code survives any model output, in both protocols (issue 21): the hand-written corpus (programs that
raise, loop, flood, forge the output frame, kill themselves with odd signals, print surrogates; answers that are
power towers) and generated replies, through complete rollouts on the real sandbox with rlvr.testing's scripted
client. Fast profile in `make test` (every corpus reply once); RLVR_FUZZ=long adds the rest (README, "Robustness")."""

from __future__ import annotations

import json
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from vf_gsm8k_code import load_environment

from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

MAX_TURNS = 3 if fuzz.long_profile() else 2  # two turns: one program run per script (the sandbox is the cost)
SANDBOX = {"timeout": 1.0}
# README "Rewards": outcome 1 / 0.1 / 0; a turn adds to verl-tool's 0.3 x success ratio + 0.05 (paid once), so a
# rollout's turn rewards sum to at most 0.35 and one turn lies in [-0.3, 0.35].
BOUNDS = Bounds(reward=(0.0, 1.0), turn_reward=(-0.3, 0.35), turn_total=(0.0, 0.35), rollout_s=60, scoring_s=60)


@cache
def environment(protocol: str):
    return load_environment(protocol=protocol, max_turns=MAX_TURNS, sandbox=SANDBOX, num_train_examples=2,
                            num_eval_examples=1)


def good(protocol: str) -> tuple[Reply, ...]:
    answer = environment(protocol).eval_dataset[0]["answer"]
    program = f"print({answer})"
    run = (Reply(f"<code>\n{program}\n</code>", label="a program") if protocol == "xml"
           else Reply("", (("python", json.dumps({"code": program})),), label="a python call"))
    return run, Reply(f"<answer>{answer}</answer>", label="the answer")


def surface(protocol: str) -> Surface:
    if protocol == "xml":
        return Surface(tags=("code", "answer"), code="tag:code", good=good(protocol))
    return Surface(tags=("answer",), tools={"python": {"code": "print(6 * 7)"}}, code="tool:python:code",
                   good=good(protocol))


@pytest.mark.parametrize("protocol", ["xml", "native"])
def test_fuzz_corpus(protocol):
    scripts = corpus.scripts(surface(protocol), MAX_TURNS, random_scripts=fuzz.random_scripts(fast=0),
                             after_valid_move=fuzz.long_profile())
    report = check_environment(environment(protocol), scripts, BOUNDS, probe=[list(good(protocol))], group_size=16,
                               name=f"vf-gsm8k-code/{protocol}")
    assert report.rollouts == len(scripts) and report.errors == {}
    assert report.max_turn_total == pytest.approx(0.35) and report.reward_range[1] == 1.0


@pytest.mark.parametrize("protocol", ["xml", "native"])
def test_fuzz_generated(protocol):
    @settings(max_examples=fuzz.hypothesis_examples(fast=8), deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.scripts(surface(protocol), MAX_TURNS))
    def run(script):
        check_environment(environment(protocol), [script], BOUNDS, name=f"vf-gsm8k-code/{protocol}/generated")

    run()
