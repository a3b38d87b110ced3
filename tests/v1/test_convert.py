"""v1 traces as rlvr rollouts (rlvr.v1.convert), on a trace recorded from tiny-random through the bridge
(data/tiny_random_trace.json: one real episode of v1-calculator, verifiers 0.4.0) and on traces in the same record
shape written out here to hold the multi-turn, multi-branch and per-turn-reward cases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr.credit.tokens import prefix_mismatch
from rlvr.rollouts import assign_advantages
from rlvr.trainer.batching import rollout_samples
from rlvr.v1.convert import V1TraceError, branches, to_rollout
from rlvr.v1.env import V1Environment, episode_seed, sampling

RECORDED = json.loads((Path(__file__).parent / "data" / "tiny_random_trace.json").read_text())
WHERE = dict(example_id=0, task="v1-test", prompt=[{"role": "user", "content": "q"}])


def node(role, parent, ids, sampled=False, scaffold=0, logprobs=None, **message):
    mask = [False] * scaffold + [sampled] * (len(ids) - scaffold)
    n_sampled = sum(mask)
    return {"parent": parent, "message": {"role": role, "content": message.pop("content", ""), **message},
            "sampled": sampled, "token_ids": ids, "mask": mask,
            "logprobs": logprobs if logprobs is not None else [-0.5] * n_sampled}


def trace(nodes, rewards=None, info=None, ok=True, **fields):
    return {"nodes": nodes, "rewards": rewards or {"correct": {"score": 1.0, "weight": 1.0}},
            "metrics": {}, "info": info or {}, "ok": ok, "errors": [], "stop_condition": None,
            "calls": [{"node": i, "finish_reason": "stop", "error": None}
                      for i, n in enumerate(nodes) if n["sampled"]], **fields}


def tool_trace(**kwargs):
    """user -> assistant (tool call) -> tool -> assistant: one branch, two turns."""
    return trace([
        node("user", None, [1, 2, 3]),
        node("assistant", 0, [9, 10, 11, 12], sampled=True, scaffold=1, logprobs=[-0.1, -0.2, -0.3],
             tool_calls=[{"id": "c", "name": "calculate", "arguments": "{}"}]),
        node("tool", 1, [20, 21]),
        node("assistant", 2, [9, 30, 31], sampled=True, scaffold=1, logprobs=[-0.4, -0.6]),
    ], **kwargs)


def test_recorded_trace_keeps_the_sampled_tokens_as_they_were():
    rollout = to_rollout(RECORDED, **WHERE)
    (turn,) = rollout.turns
    nodes = RECORDED["nodes"]
    user, assistant = nodes
    assert list(turn.tokens.prompt_ids) + list(turn.tokens.completion_ids) == user["token_ids"] + assistant["token_ids"]
    sampled = [t for t, m in zip(assistant["token_ids"], assistant["mask"], strict=True) if m]
    assert list(turn.tokens.completion_ids) == sampled
    assert list(turn.tokens.completion_logprobs) == nodes[1]["logprobs"]
    assert turn.reward == RECORDED["info"]["turn_rewards"][0]
    assert rollout.outcome == 0.0 and rollout.error is None
    assert rollout.truncated  # tiny-random ran into max_tokens: finish_reason "length"


def test_tool_turns_form_one_sequence_with_their_rewards():
    rollout = to_rollout(tool_trace(info={"turn_rewards": [1.0, 0.25]}), **WHERE)
    first, second = rollout.turns
    assert first.tokens.prompt_ids == (1, 2, 3, 9) and first.tokens.completion_ids == (10, 11, 12)
    assert second.tokens.prompt_ids == (1, 2, 3, 9, 10, 11, 12, 20, 21, 9)
    assert second.tokens.completion_logprobs == (-0.4, -0.6)
    assert [t.tool_result for t in rollout.turns] == [True, False]
    assert rollout.completion[0]["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "calculate", "arguments": "{}"}}]
    assert [m["role"] for m in rollout.completion] == ["assistant", "tool", "assistant"]
    assert rollout.turn_rewards == [1.0, 0.25] and rollout.turn_level and rollout.first_result_turn == 0
    assert prefix_mismatch([t.tokens for t in rollout.turns]) is None
    credited = assign_advantages([rollout, to_rollout(tool_trace(info={"turn_rewards": [0.0, 0.0]},
                                                                 rewards={"correct": {"score": 0.0}}), **WHERE)],
                                 "mt_grpo", {})
    samples = rollout_samples(credited[0])
    assert samples.packed and len(samples.samples) == 1
    assert credited[0].advantages[0] > 0 > credited[1].advantages[0]


def test_turn_rewards_by_node_index_and_on_the_nodes():
    by_index = to_rollout(tool_trace(info={"turn_rewards": {"3": 0.5}}), **WHERE)
    assert by_index.turn_rewards == [0.0, 0.5]
    on_nodes = tool_trace()
    on_nodes["nodes"][1]["reward"], on_nodes["nodes"][3]["reward"] = 0.75, 0.0
    assert to_rollout(on_nodes, **WHERE).turn_rewards == [0.75, 0.0]
    assert not to_rollout(tool_trace(), **WHERE).turn_level  # none given: outcome-only credit


def test_outcome_is_the_weighted_rewards():
    rollout = to_rollout(tool_trace(rewards={"a": {"score": 0.5, "weight": 2.0}, "b": {"score": 1.0, "weight": 0.5},
                                             "skipped": None}), **WHERE)
    assert rollout.outcome == 1.5 and rollout.metrics == {"a": 0.5, "b": 1.0}


def test_branches_that_are_not_prefixes_train_turn_by_turn():
    """A re-rendered history (e.g. after compaction) forks the graph: each branch's turns keep their own prompt,
    a turn on the shared stem is one turn, and rlvr's batching trains the turns as separate samples."""
    t = tool_trace()
    t["nodes"].append(node("user", 0, [40, 41]))  # a second branch from the first prompt
    t["nodes"].append(node("assistant", 4, [9, 50], sampled=True, scaffold=1, logprobs=[-0.7]))
    assert branches(t["nodes"]) == [[0, 1, 2, 3], [0, 4, 5]]
    rollout = to_rollout(t, **WHERE)
    assert [turn.tokens.prompt_ids for turn in rollout.turns][-1] == (1, 2, 3, 40, 41, 9)
    assert len(rollout.turns) == 3
    samples = rollout_samples(assign_advantages([rollout], "grpo", {})[0])
    assert not samples.packed and len(samples.samples) == 3


def test_a_sampled_node_without_token_ids_is_named():
    t = tool_trace()
    t["nodes"][3].update(token_ids=[], mask=[], logprobs=[])
    with pytest.raises(V1TraceError, match="node 3 carries no token ids.*TrainClientConfig"):
        to_rollout(t, **WHERE)


def test_turn_rewards_must_match_the_sampled_nodes():
    with pytest.raises(V1TraceError, match="1 values for 2 sampled"):
        to_rollout(tool_trace(info={"turn_rewards": [1.0]}), **WHERE)


def test_failed_and_truncated_traces():
    failed = tool_trace(ok=False, errors=[{"type": "TaskError", "message": "reward raised"}])
    assert to_rollout(failed, **WHERE).error == "TaskError: reward raised"
    assert to_rollout(tool_trace(stop_condition="max_turns"), **WHERE).truncated
    assert not to_rollout(tool_trace(), **WHERE).truncated


def test_sampling_and_seeds():
    assert sampling({"temperature": 0.7, "max_tokens": 64, "logprobs": True,
                     "extra_body": {"return_token_ids": True, "top_k": 5}}) == {
        "temperature": 0.7, "max_tokens": 64, "top_k": 5}
    assert episode_seed(0, 1, 2, 3) == episode_seed(0, 1, 2, 3) != episode_seed(0, 1, 2, 4)


def test_environment_arguments_are_checked():
    env = V1Environment("v1:v1-calculator", {"taskset": {"num_tasks": 4}, "rlvr": {"episode_timeout": 5}})
    assert env.config == {"taskset": {"num_tasks": 4, "id": "v1-calculator"}} and env.episode_timeout == 5
    assert env.deadline_margin == 30
    env = V1Environment("v1:v1-calculator", {"rlvr": {"deadline_margin": 15}})
    assert env.deadline_margin == 15 and env.episode_timeout == 600
    with pytest.raises(RuntimeError, match="only ones are episode_timeout and deadline_margin"):
        V1Environment("v1:x", {"rlvr": {"timeout": 5}})
    with pytest.raises(RuntimeError, match="names no environment"):
        V1Environment("v1:")


def test_evaluation_states_read_back_as_the_same_rollouts():
    """`rlvr evaluate` saves v1 rollouts through verifiers 0.1.9's GenerateOutputs (rlvr.v1.env.generate_state)."""
    import dataclasses

    from rlvr.rollouts import from_state
    from rlvr.v1.env import generate_state

    for rollout in (to_rollout(tool_trace(info={"turn_rewards": [1.0, 0.0]}), **WHERE), to_rollout(RECORDED, **WHERE),
                    to_rollout(tool_trace(ok=False, errors=[{"type": "E", "message": "m"}]), **WHERE)):
        back = from_state(generate_state(rollout))
        assert dataclasses.replace(back, error=rollout.error) == rollout
        assert (back.error is None) == (rollout.error is None)


def test_an_evaluation_with_a_bare_tool_call_saves(tmp_path):
    """A v1 tool call with no content (what a model that only calls the tool writes) is saved beside messages with
    text: its content is "", not missing (verifiers 0.1.9's saving turned a missing one into a list)."""
    from rlvr import evaluation
    from rlvr.v1.env import generate_state

    bare = tool_trace()
    del bare["nodes"][1]["message"]["content"]
    rollouts = [to_rollout(bare, **WHERE), to_rollout(RECORDED, **WHERE)]
    assert rollouts[0].completion[0]["content"] == "" and rollouts[0].completion[0]["tool_calls"]
    results = {"prompt": [r.prompt for r in rollouts], "completion": [r.completion for r in rollouts],
               "answer": ["" for _ in rollouts], "task": [r.task for r in rollouts], "info": [{} for _ in rollouts],
               "example_id": [r.example_id for r in rollouts], "reward": [r.outcome for r in rollouts],
               "metrics": {}, "state": [generate_state(r) for r in rollouts],
               "metadata": {"env_id": "v1-test", "env_args": {}, "model": "m", "base_url": "u", "num_examples": 1,
                            "rollouts_per_example": 2, "sampling_args": {}, "date": "d", "time_ms": 0.0,
                            "avg_reward": 0.5, "avg_metrics": {}, "state_columns": [], "path_to_save": None}}
    evaluation.save_results(results, tmp_path / "eval")
    saved = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert saved[0]["completion"][0]["content"] == "" and len(saved) == 2


def test_anchor_states_for_gigpo():
    rollout = to_rollout(tool_trace(info={"turn_rewards": [1.0, 0.0], "state_keys": ["start", "after_tool"]}), **WHERE)
    assert rollout.state_keys == ["start", "after_tool"]
    other = to_rollout(tool_trace(info={"turn_rewards": [0.0, 0.0], "state_keys": ["start", "elsewhere"]},
                                  rewards={"correct": {"score": 0.0}}), **WHERE)
    credited = assign_advantages([rollout, other], "gigpo", {})
    assert credited[0].advantages[0] > credited[1].advantages[0]
    assert not to_rollout(tool_trace(), **WHERE).state_keys


def test_a_server_started_for_a_v1_environment_gets_the_token_route():
    """`rlvr train / evaluate / predict / benchmark` without a server of the user's start one with these flags."""
    from rlvr.evaluation import server_flags
    from rlvr.v1 import V1Environment
    from rlvr.v1.bridge import SERVE_FLAGS

    assert SERVE_FLAGS == ("--enable-scale-out",)
    assert server_flags("v1:v1-calculator") == ["--enable-scale-out"]
    assert server_flags(V1Environment("v1:v1-calculator")) == ["--enable-scale-out"]
    assert server_flags("vf-triviaqa-search") == [] and server_flags() == []
    assert server_flags("vf-triviaqa-search", "v1:v1-calculator") == ["--enable-scale-out"]
    # the user's flags come first, and one they already give is not repeated
    assert server_flags("v1:x", given=["--kv-cache-gb", "1"]) == ["--kv-cache-gb", "1", "--enable-scale-out"]
    assert server_flags("v1:x", given=["--enable-scale-out"]) == ["--enable-scale-out"]
    assert server_flags("vf-triviaqa-search", given=["--seed", "3"]) == ["--seed", "3"]
