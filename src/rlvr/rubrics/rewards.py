"""Reward functions shared by the environments.

Turn functions (TurnRubric's turn_funcs) take `(turn, env_reply, answer, state, **kw)`: the assistant message(s)
of one turn and the environment's reply to it. Outcome functions take verifiers' usual `(completion, answer, ...)`.
Parameters (scale, tags, weights) are keyword arguments with the original values as defaults: bind others with
functools.partial (TurnRubric names a partial after the function it wraps).

Sources: the MT-GRPO paper's TriviaQA rubric (SiliangZeng/Multi-Turn-RL-Agent, verifiers/rubrics/
triviaqa_tool_rubric.py: tool_execution_reward_func 0.2 x successful/attempted, exist_answer_in_search_results 0.5,
exact_match 1.0) and the SQuAD v1.1 evaluation script for normalisation and token F1. The original functions are
trajectory-level; as turn functions they score one turn, so on a rollout with a single tool turn (the paper's
setting, max_steps=2) the sum over turns equals the original value.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import verifiers as vf

Message = dict[str, Any]
RESULT_TAGS = ("result", "output")


def message_text(message: Message | str) -> str:
    """The text of a chat message (string content or the text parts of a content list)."""
    if isinstance(message, str):
        return message
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def _messages(messages: Sequence[Message] | str) -> list[Message | str]:
    return [messages] if isinstance(messages, str) else list(messages)


def tagged(text: str, tag: str) -> str | None:
    """Content of the first <tag>...</tag> in text, stripped; None when absent."""
    match = re.search(rf"<{tag}>\s*(.*?)\s*</{tag}>", text, re.DOTALL)
    return match.group(1) if match else None


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
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
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


def _final_answer(completion, parser: vf.Parser | None) -> str | None:
    if parser is None:
        raise ValueError("no parser given: pass the rubric's parser (TurnRubric(parser=...)) to parse the final answer")
    return parser.parse_answer(completion)


def exact_match(completion, answer, parser: vf.Parser | None = None, *, weight: float = 1.0, **kwargs) -> float:
    """Outcome reward: `weight` if the parsed final answer matches an alias after SQuAD normalisation.

    `parser` is the rubric's parser (verifiers passes it to reward functions that ask for it)."""
    return weight * exact_match_score(_final_answer(completion, parser), answer)


def token_f1(completion, answer, parser: vf.Parser | None = None, *, weight: float = 1.0, **kwargs) -> float:
    """Outcome reward: `weight` x the best SQuAD token F1 between the parsed final answer and the aliases."""
    return weight * token_f1_score(_final_answer(completion, parser), answer)


# --- turn rewards ---


def tool_execution_reward(
    turn,
    env_reply,
    *,
    scale: float = 0.2,
    tool_tag: str = "tool",
    error_prefixes: Sequence[str] = ("Error:",),
    **kwargs,
) -> float:
    """Turn reward: scale x successful / attempted tool calls of this turn (0 when the turn called no tool).

    Original: `0.2 * (successful / tool_attempts)` with success = a <result> that does not start with "Error:"
    (Multi-Turn-RL-Agent, triviaqa_tool_rubric.py, tool_execution_reward_func). A call counts as attempted only
    when the environment replied to it, as there. Native calls are the assistant's `tool_calls`, answered by "tool"
    messages; an XML call is a <tool_tag> block answered by a <result>/<output> user message. Give ToolEnv an
    error_formatter that starts with one of `error_prefixes` so that failures are recognisable.
    Parameterise with functools.partial, e.g. partial(tool_execution_reward, scale=1.0).
    """
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
    if attempted == 0:
        return 0.0
    successful = sum(1 for r in results[:attempted] if r.strip() and not r.lstrip().startswith(tuple(error_prefixes)))
    return scale * successful / attempted


def answer_in_search_results(env_reply, answer, *, reward: float = 0.5, **kwargs) -> float:
    """Turn reward: `reward` when an answer alias occurs (case-insensitive) in this turn's tool results.

    Original: 0.5 if any `str(a).lower() in search_result.lower()` (triviaqa_tool_rubric.py,
    exist_answer_in_search_results).
    """
    text = "\n".join(tool_results(env_reply)).lower()
    if not text:
        return 0.0
    return reward if any(a.lower() in text for a in _aliases(answer) if a) else 0.0


def xml_format_reward(completion, parser: vf.Parser | None = None, *, weight: float = 1.0, **kwargs) -> float:
    """Outcome reward: `weight` x verifiers' XMLParser format score (mean over assistant messages, in [0, 1])."""
    if not isinstance(parser, vf.XMLParser):
        raise ValueError(
            f"xml_format_reward needs the rubric's parser to be a verifiers XMLParser, got {type(parser).__name__}; "
            "create TurnRubric(parser=vf.XMLParser([...]))"
        )
    return weight * parser.get_format_reward_func()(completion)
