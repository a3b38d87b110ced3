"""Reward functions of vf-musique (verifiers signatures) over the pure metrics in vf_musique.metrics."""

from __future__ import annotations

import verifiers as vf

from vf_musique import metrics
from vf_musique.env import supporting_ids

CITATION_WEIGHT = 0.5  # in the hop-weighted reward: the answer counts twice as much as its citations


def _golds(answer: str, info: dict) -> list[str]:
    # MuSiQue evaluate_v1.0.py: ground_truth_answers = [answer] + answer_aliases.
    return [answer, *info.get("aliases", [])]


def _final(completion: vf.Messages, parser: vf.XMLParser):
    """The parsed fields (answer, citations) of the last assistant message, or None without one."""
    assistant = (
        [m for m in completion if m.get("role") == "assistant"] if isinstance(completion, list) else []
    )
    return parser.parse(str(assistant[-1].get("content") or "")) if assistant else None


def _citations(completion, parser) -> list[str]:
    final = _final(completion, parser)
    return metrics.parse_citations(getattr(final, "citations", None))


def exact_match(completion, answer, info, parser, **kwargs) -> float:
    return metrics.answer_em(parser.parse_answer(completion), _golds(answer, info))


def token_f1(completion, answer, info, parser, **kwargs) -> float:
    return metrics.answer_f1(parser.parse_answer(completion), _golds(answer, info))


def retrieval_recall(state, info, **kwargs) -> float:
    """Share of the supporting paragraphs that any search returned."""
    return metrics.recall(state.get("retrieved_ids", []), supporting_ids(info))


def retrieval_precision(state, info, **kwargs) -> float:
    """Share of the retrieved paragraphs that are supporting."""
    return metrics.precision(state.get("retrieved_ids", []), supporting_ids(info))


def citation_precision(completion, info, parser, **kwargs) -> float:
    return metrics.precision(_citations(completion, parser), supporting_ids(info))


def citation_recall(completion, info, parser, **kwargs) -> float:
    return metrics.recall(_citations(completion, parser), supporting_ids(info))


def hop_weighted_reward(completion, answer, info, parser, **kwargs) -> float:
    """hop_weight(hops) * (answer F1 + CITATION_WEIGHT * citation F1); see README "Rewards" for why."""
    cited = _citations(completion, parser)
    gold = supporting_ids(info)
    citation_f1 = metrics.f1(metrics.precision(cited, gold), metrics.recall(cited, gold))
    answer_f1 = metrics.answer_f1(parser.parse_answer(completion), _golds(answer, info))
    return metrics.hop_weight(info["hops"]) * (answer_f1 + CITATION_WEIGHT * citation_f1)


def new_supporting_retrieved(turn_index: int, state, info, **kwargs) -> float:
    """Turn reward: the share of the supporting paragraphs first retrieved in this turn (sums to the recall)."""
    gold = set(supporting_ids(info))
    if not gold:
        return 0.0
    before = {i for r in state.get("retrievals", []) if r["turn"] < turn_index for i in r["ids"]}
    now = {i for r in state.get("retrievals", []) if r["turn"] == turn_index for i in r["ids"]}
    return len((now - before) & gold) / len(gold)
