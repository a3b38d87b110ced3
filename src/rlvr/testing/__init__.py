"""Fuzz testing for environments: does an environment survive anything a policy writes? (issue 21)

    rlvr.testing.client      ScriptedClient: an OpenAI-compatible client replaying crafted assistant messages
                             (text and native tool calls), so that rollouts run without a model server
    rlvr.testing.corpus      Surface (what an environment parses) and a corpus of hand-written nasty outputs
    rlvr.testing.strategies  hypothesis strategies for generated outputs (needs hypothesis)
    rlvr.testing.fuzz        check_environment: complete rollouts + scoring, and every property checked

How an environment adds itself: a test module in the environment's tests/, named tests/test_<env>_fuzz.py (pytest
collects every environment's tests in one run, so module names must differ; vf-triviaqa-search's
tests/test_triviaqa_fuzz.py is a complete example, and `rlvr env init` writes one into every new environment):

    from hypothesis import given, settings
    from rlvr.testing import Bounds, Reply, Surface, check_environment, corpus, fuzz, strategies

    SURFACE = Surface(tags=("answer",), tools={"search": {"query": "Ada Lovelace"}},
                      good=(Reply("", (("search", '{"query": "Ada"}'),), label="a search"),))
    BOUNDS = Bounds(reward=(0.0, 1.0),          # the documented range of the rollout reward
                    turn_reward=(0.0, 0.2),     # ... of one turn's reward
                    turn_total=(0.0, 0.2))      # ... of a rollout's summed turn rewards (the anti-farming cap)

    ENV = load_environment(num_train_examples=4, num_eval_examples=1, max_turns=3)

    def test_fuzz_corpus():
        scripts = corpus.scripts(SURFACE, max_turns=3, random_scripts=fuzz.random_scripts(fast=20))
        check_environment(ENV, scripts, BOUNDS, probe=[list(SURFACE.good)])

    @settings(max_examples=fuzz.hypothesis_examples(), deadline=None)
    @given(strategies.scripts(SURFACE, max_turns=3))
    def test_fuzz_generated(script):
        check_environment(ENV, [script], BOUNDS)

Describe the environment's parsing in the Surface: its XML tags, a JSON tool-command tag, native tools with a
valid arguments object, how it runs code, its text actions, and a few valid moves (repeated and alternated to try
to farm turn rewards). Keep the fast profile to a few seconds (it runs in `make test`); `RLVR_FUZZ=long` turns
`random_scripts` and `hypothesis_examples` up to thousands, and `RLVR_FUZZ_REPORT=<file>` appends each check's
report (rollouts, time maxima, reward ranges seen, stop conditions) to that file as a JSON line.
"""

from rlvr.testing import corpus, fuzz
from rlvr.testing.client import Reply, ScriptedClient
from rlvr.testing.corpus import Surface
from rlvr.testing.fuzz import Bounds, FuzzFailure, FuzzReport, check_environment

__all__ = [
    "Bounds",
    "FuzzFailure",
    "FuzzReport",
    "Reply",
    "ScriptedClient",
    "Surface",
    "check_environment",
    "corpus",
    "fuzz",
]
