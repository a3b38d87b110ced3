"""Reward functions and answer metrics shared by the environments (each is used by at least one of them).

Turn functions (TurnRubric's `turn_rewards`) take `(turn, env_reply, answer, state, **kw)`: the assistant
message(s) of one turn and the environment's reply to it. Outcome functions take verifiers' usual
`(completion, answer, ...)`. Parameters (scale, tags) are keyword arguments with the original values as defaults:
bind others with functools.partial (TurnRubric names a partial after the function it wraps).

Sources: the MT-GRPO paper's TriviaQA rubric (SiliangZeng/Multi-Turn-RL-Agent, verifiers/rubrics/
triviaqa_tool_rubric.py: tool_execution_reward_func 0.2 x successful/attempted) and the SQuAD v1.1 evaluation
script for normalisation and token F1 (vf-musique's answer metrics).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import verifiers as vf

from rlvr.rubrics.parsing import Message, message_text, tagged

RESULT_TAGS = ("result", "output")
_PUNCTUATION = frozenset(string.punctuation)


def _messages(messages: Sequence[Message] | str) -> list[Message | str]:
    return [messages] if isinstance(messages, str) else list(messages)


def earlier_turns(step: dict | None, prompt: Sequence[Message] | None) -> list[tuple[list[Message], list[Message]]]:
    """The (assistant messages, environment reply) of every turn before `step`, read from the step's prompt (the
    rollout's prompt followed by the conversation so far). Turn functions use it to score a turn against the
    rollout's history; without a step (a function called on its own) there is none."""
    if step is None or prompt is None or not isinstance(step.get("prompt"), list):
        return []
    turns: list[tuple[list[Message], list[Message]]] = []
    for message in step["prompt"][len(prompt) :]:
        if isinstance(message, dict) and message.get("role") == "assistant":
            if not turns or turns[-1][1]:
                turns.append(([], []))
            turns[-1][0].append(message)
        elif turns:
            turns[-1][1].append(message)
    return turns


def is_tool_result(env_reply: Sequence[Message] | str, tags: Iterable[str] = RESULT_TAGS) -> bool:
    """Whether the environment's reply carries a tool result.

    A "tool" role message (native tool calling), or a user message containing <result> or <output>: the MT-GRPO
    code tests `'<result>' in user_msg` (mt_grpo_env_trainer.py, _find_result_positions) and verl-tool's port
    also accepts `<output>` (mt_grpo_core_algos.py, find_result_segment).
    """
    tags = tuple(tags)
    for m in _messages(env_reply):
        role = "user" if isinstance(m, str) else m.get("role")
        if role == "tool":
            return True
        if role == "user" and any(f"<{t}>" in message_text(m) for t in tags):
            return True
    return False


def tool_results(env_reply: Sequence[Message] | str, tags: Iterable[str] = RESULT_TAGS) -> list[str]:
    """The texts of the tool results in an environment reply (tool messages, or <result>/<output> contents)."""
    out = []
    for m in _messages(env_reply):
        role = "user" if isinstance(m, str) else m.get("role")
        if role == "tool":
            out.append(message_text(m))
        elif role == "user":
            out += [r for t in tags if (r := tagged(message_text(m), t)) is not None]
    return out


# --- SQuAD normalisation, exact match, token F1 (SQuAD v1.1 evaluate-v1.1.py: normalize_answer, f1_score) ---


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, the articles a/an/the and extra whitespace (SQuAD v1.1 normalize_answer)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _aliases(answer: Any) -> list[str]:
    """An answer field as a list of accepted strings: a string, a list of aliases, or a dict with "aliases"."""
    if answer is None:
        return []
    if isinstance(answer, str):
        return [answer]
    if isinstance(answer, dict):
        return _aliases(answer.get("aliases") or answer.get("answer"))
    return [str(a) for a in answer]


def exact_match_score(prediction: str | None, answer: Any) -> float:
    """1.0 when the normalised prediction equals a normalised alias (SQuAD v1.1 exact_match_score, max over aliases)."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in _aliases(answer)))


def token_f1_score(prediction: str | None, answer: Any) -> float:
    """Best token-level F1 over the aliases (SQuAD v1.1 f1_score with metric_max_over_ground_truths)."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction).split()
    best = 0.0
    for alias in _aliases(answer):
        gold = normalize_answer(alias).split()
        common = sum((Counter(pred) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(pred), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


# --- turn rewards ---


def tool_calls_made(
    turn, env_reply, *, tool_tag: str = "tool", error_prefixes: Sequence[str] = ("Error:",)
) -> tuple[int, int]:
    """(attempted, successful) tool calls of one turn. A call counts as attempted only when the environment replied
    to it, and succeeded when its result is not empty and does not start with one of `error_prefixes`
    (Multi-Turn-RL-Agent, triviaqa_tool_rubric.py). Native calls are the assistant's `tool_calls`, answered by
    "tool" messages; an XML call is a <tool_tag> block answered by a <result>/<output> user message."""
    native_calls = sum(len(m.get("tool_calls") or []) for m in _messages(turn) if isinstance(m, dict))
    replies = _messages(env_reply)
    if native_calls:
        results = [message_text(m) for m in replies if isinstance(m, dict) and m.get("role") == "tool"]
        attempted = min(native_calls, len(results))
    else:
        wrote_call = any(tagged(message_text(m), tool_tag) is not None for m in _messages(turn))
        attempted = 1 if wrote_call and replies else 0
        # an XML turn makes one call; a reply without a <result> is a failed call (e.g. a parse error message)
        results = tool_results(replies)[:1]
    prefixes = tuple(error_prefixes)
    successful = sum(1 for r in results[:attempted] if r.strip() and not r.lstrip().startswith(prefixes))
    return attempted, successful


def tool_execution_reward(
    turn,
    env_reply,
    step: dict | None = None,
    prompt: list | None = None,
    *,
    scale: float = 0.2,
    tool_tag: str = "tool",
    error_prefixes: Sequence[str] = ("Error:",),
    **kwargs,
) -> float:
    """Turn reward: what this turn adds to the rollout's tool-execution score, scale x successful / attempted.

    The original is trajectory-level, `0.2 * (successful / tool_attempts)` over the whole rollout
    (Multi-Turn-RL-Agent, triviaqa_tool_rubric.py, tool_execution_reward_func). As a turn function it is the change
    this turn makes to that ratio over the turns so far (the earlier ones are read from `step`'s prompt), so a
    rollout's turn rewards sum to the original value: in the paper's setting (one tool turn) that is the turn's own
    ratio, and repeating calls over more turns cannot earn more than `scale` in total (issue 21). A failed call
    after a successful one lowers the ratio, so that turn's reward is negative; every turn lies in [-scale, scale].
    Called without `step` (on one turn alone) it is that turn's ratio. Give a ToolEnv an error_formatter that starts
    with one of `error_prefixes` so that failures are recognisable. Parameterise with functools.partial, e.g.
    partial(tool_execution_reward, scale=1.0).
    """
    counts = dict(tool_tag=tool_tag, error_prefixes=error_prefixes)
    history = [tool_calls_made(t, r, **counts) for t, r in earlier_turns(step, prompt)]
    attempted_before, successful_before = sum(a for a, _ in history), sum(s for _, s in history)
    attempted, successful = tool_calls_made(turn, env_reply, **counts)

    def score(successful: int, attempted: int) -> float:
        return scale * successful / attempted if attempted else 0.0

    after = score(successful_before + successful, attempted_before + attempted)
    return after - score(successful_before, attempted_before)


def xml_format_reward(completion, parser: vf.Parser | None = None, **kwargs) -> float:
    """Outcome reward: verifiers' XMLParser format score (mean over assistant messages, in [0, 1])."""
    if not isinstance(parser, vf.XMLParser):
        raise ValueError(
            f"xml_format_reward needs the rubric's parser to be a verifiers XMLParser, got {type(parser).__name__}; "
            "create TurnRubric(parser=XMLParser([...])) (rlvr.rubrics.parsing)"
        )
    return parser.get_format_reward_func()(completion)
