"""verifiers v1 traces (their JSON records, `Trace.to_record()`) as rlvr `Rollout` records.

A v1 trace is a graph of message nodes; a root-to-leaf path is a branch (verifiers/v1/trace.py, `Trace.branches`).
Each node holds its share of the token sequence (`token_ids`: its template scaffold, then its own tokens), with
`mask` True on the tokens the model sampled and `logprobs` for those. Every sampled assistant node becomes one rlvr
turn, taken as sampled (no re-tokenisation): its prompt is the tokens of the nodes before it on its branch plus its
own unsampled scaffold, its completion the rest of its tokens. A node shared by several branches is one turn, in
the branch that reaches it first. When every branch extends the previous one the turns form one token sequence and
train as one packed sample; branches that are not prefixes of each other fail rlvr's prefix check
(rlvr.credit.tokens.prefix_mismatch) and each turn trains as its own sample (rlvr.trainer.batching).

Rewards: the outcome is the trace's weighted rewards, sum of score x weight (verifiers' `Trace.reward`). Per-turn
rewards, where the environment gives them, come from `trace.info["turn_rewards"]`: a list with one value per
sampled node in node order, or a mapping from node index to value (the trace.info convention proposed for
per-turn rewards in prime-rl PR #3282), or from a `reward` field on the sampled nodes themselves (per-node
rewards, verifiers PR #1554's proposal). Without any, the turns have reward None (outcome-only credit). Anchor
states (GiGPO) come the same way from `trace.info["state_keys"]`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.credit import TurnTokens
from rlvr.rollouts import Rollout, Turn

LIMIT_STOPS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed")


class V1TraceError(ValueError):
    """A v1 trace rlvr cannot train on, with the reason and the fix."""


def branches(nodes: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Node indices of each root-to-leaf path, in leaf order (verifiers' `Trace.branches`)."""
    parents = {n.get("parent") for n in nodes}
    paths = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, node = [], leaf
        while node is not None:
            path.append(node)
            node = nodes[node].get("parent")
        paths.append(path[::-1])
    return paths


def node_tokens(node: Mapping[str, Any], index: int) -> tuple[list[int], TurnTokens]:
    """A sampled node's unsampled scaffold and its turn tokens (prompt left empty: the caller adds the branch)."""
    ids = [int(t) for t in node.get("token_ids") or []]
    mask = [bool(m) for m in node.get("mask") or []]
    if not ids or len(mask) != len(ids) or not any(mask):
        raise V1TraceError(
            f"sampled message node {index} carries no token ids (the episode ran with a client that returns none, "
            "e.g. verifiers' eval client); rlvr's bridge samples through verifiers' TrainClientConfig: remove any "
            "`client` the environment's agent pins (docs/v1.md)")
    start = mask.index(True)
    logprobs = iter(float(x) for x in node.get("logprobs") or [])
    completion_logprobs = [next(logprobs, 0.0) if m else 0.0 for m in mask[start:]]
    return ids[:start], TurnTokens((), tuple(ids[start:]), tuple(completion_logprobs),
                                   tuple(int(m) for m in mask[start:]))


def turn_rewards(trace: Mapping[str, Any], sampled: Sequence[int]) -> dict[int, float] | None:
    """Node index -> the environment's reward for that turn, or None when the trace gives none."""
    given = (trace.get("info") or {}).get("turn_rewards")
    if given is None:
        per_node = {i: trace["nodes"][i].get("reward") for i in sampled}
        if all(v is None for v in per_node.values()):
            return None
        given = per_node
    if isinstance(given, Mapping):
        rewards = {int(k): float(v) for k, v in given.items() if v is not None}
    else:
        if len(given) != len(sampled):
            raise V1TraceError(f"trace.info['turn_rewards'] has {len(given)} values for {len(sampled)} sampled "
                               "message nodes: give one per sampled node, in node order, or a mapping from node "
                               "index to reward")
        rewards = {i: float(v) for i, v in zip(sampled, given, strict=True)}
    if any(not math.isfinite(v) for v in rewards.values()):
        raise V1TraceError(f"trace.info['turn_rewards'] holds a non-finite value: {rewards}")
    return {i: rewards.get(i, 0.0) for i in sampled}


def state_keys(trace: Mapping[str, Any], sampled: Sequence[int]) -> dict[int, Any]:
    """Node index -> the anchor state the turn acted on (GiGPO's), from `trace.info["state_keys"]` (one per sampled
    node in node order, or a mapping from node index); empty when the trace gives none."""
    given = (trace.get("info") or {}).get("state_keys")
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return {int(k): v for k, v in given.items()}
    if len(given) != len(sampled):
        raise V1TraceError(f"trace.info['state_keys'] has {len(given)} values for {len(sampled)} sampled message "
                           "nodes: give one per sampled node, in node order")
    return dict(zip(sampled, given, strict=True))


def chat_message(message: Mapping[str, Any]) -> dict:
    """A v1 message in the OpenAI chat shape rlvr's records use: unset fields dropped, tool calls as
    {id, type: function, function: {name, arguments}} (v1 keeps them flat), content always a string ("" where v1
    has none, as on a bare tool call: verifiers 0.1.9's message_to_printable leaves a missing content as a list,
    which breaks saving an evaluation whose other messages have text)."""
    out = {k: v for k, v in message.items() if v is not None and k != "tool_calls"}
    out.setdefault("content", "")
    calls = message.get("tool_calls") or []
    if calls:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                              "function": {"name": c.get("name"), "arguments": c.get("arguments") or "{}"}}
                             for c in calls]
    return out


def outcome(trace: Mapping[str, Any]) -> float:
    return math.fsum(float(r["score"]) * float(r.get("weight", 1.0))
                     for r in (trace.get("rewards") or {}).values() if r is not None)


def truncated(trace: Mapping[str, Any]) -> bool:
    """verifiers' `Trace.is_truncated`: a framework limit, or the last answered call ended at its length."""
    if trace.get("stop_condition") in LIMIT_STOPS:
        return True
    answered = [c for c in trace.get("calls") or [] if c.get("error") is None]
    return bool(answered) and answered[-1].get("finish_reason") == "length"


def error_text(trace: Mapping[str, Any]) -> str | None:
    if trace.get("ok"):
        return None
    errors = trace.get("errors") or []
    return "; ".join(f"{e.get('type')}: {e.get('message')}" for e in errors) or "the trace did not finish"


def to_rollout(trace: Mapping[str, Any], *, example_id: int, task: str, prompt: list[dict], answer: Any = "",
               error: str | None = None) -> Rollout:
    """One trace as one rollout; `error` is the episode's own (a trace's errors are read from it)."""
    nodes = trace.get("nodes") or []
    sampled = [i for i, n in enumerate(nodes) if n.get("sampled")]
    rewards = turn_rewards(trace, sampled)
    keys = state_keys(trace, sampled)
    turns, seen = [], set()
    paths = branches(nodes)
    for path in paths:
        prefix: list[int] = []
        for position, i in enumerate(path):
            node = nodes[i]
            if node.get("sampled") and i not in seen:
                seen.add(i)
                scaffold, tokens = node_tokens(node, i)
                after = nodes[path[position + 1]] if position + 1 < len(path) else None
                turns.append(Turn(
                    reward=None if rewards is None else rewards[i],
                    reward_parts={} if rewards is None else {"turn_reward": rewards[i]},
                    tool_result=bool(after and (after.get("message") or {}).get("role") == "tool"),
                    state_key=keys.get(i),
                    tokens=TurnTokens(tuple(prefix + scaffold), tokens.completion_ids, tokens.completion_logprobs,
                                      tokens.completion_mask),
                ))
            prefix += [int(t) for t in node.get("token_ids") or []]
    last = paths[-1] if paths else []
    first_sampled = next((k for k, i in enumerate(last) if nodes[i].get("sampled")), len(last))
    metrics = {name: float(r["score"]) for name, r in (trace.get("rewards") or {}).items() if r is not None}
    metrics.update({name: float(v) for name, v in (trace.get("metrics") or {}).items() if v is not None})
    return Rollout(
        example_id=example_id, task=task, prompt=prompt,
        completion=[chat_message(nodes[i].get("message") or {}) for i in last[first_sampled:]],
        answer=answer, outcome=outcome(trace), metrics=metrics, turns=tuple(turns),
        error=error or error_text(trace), truncated=truncated(trace),
    )


def failed_rollout(*, example_id: int, task: str, prompt: list[dict], answer: Any, error: str) -> Rollout:
    """An episode that produced no trace (killed, timed out, crashed): scored as a failure, nothing to train."""
    return Rollout(example_id=example_id, task=task, prompt=prompt, completion=[], answer=answer, outcome=0.0,
                   metrics={}, turns=(), error=error)
