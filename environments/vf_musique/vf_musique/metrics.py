"""Pure metrics: answer EM/F1 with MuSiQue's official semantics, retrieval and citation precision/recall.

Answer metrics follow StonyBrookNLP/musique metrics/answer.py (used by evaluate_v1.0.py): SQuAD normalisation,
the max over [answer] + answer_aliases, and compute_f1's empty rule: when the prediction or the gold answer
normalises to no tokens, F1 is 1 if both do and 0 otherwise (SQuAD v1.1's script would give 0 for both empty).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rlvr.rubrics.rewards import exact_match_score, normalize_answer, token_f1_score


def answer_em(prediction: str | None, golds: Sequence[str]) -> float:
    """max over golds of [normalize(prediction) == normalize(gold)] (musique metrics/answer.py compute_exact)."""
    return exact_match_score(prediction or "", list(golds)) if golds else 0.0


def answer_f1(prediction: str | None, golds: Sequence[str]) -> float:
    """max over golds of token F1 (musique metrics/answer.py compute_f1, metric_max_over_ground_truths)."""
    pred_tokens = normalize_answer(prediction or "").split()
    scores = []
    for gold in golds:
        gold_tokens = normalize_answer(gold).split()
        if not pred_tokens or not gold_tokens:
            scores.append(float(pred_tokens == gold_tokens))
        else:
            scores.append(token_f1_score(prediction, gold))
    return max(scores, default=0.0)


def precision(predicted: Iterable, gold: Iterable) -> float:
    """|predicted & gold| / |predicted| over sets; 0 when nothing is predicted."""
    predicted, gold = set(predicted), set(gold)
    return len(predicted & gold) / len(predicted) if predicted else 0.0


def recall(predicted: Iterable, gold: Iterable) -> float:
    """|predicted & gold| / |gold| over sets; 0 when there is no gold (nothing to recall, nothing earned)."""
    predicted, gold = set(predicted), set(gold)
    return len(predicted & gold) / len(gold) if gold else 0.0


def f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def hop_weight(hops: int) -> float:
    """hops / 2: a 2-hop question weighs 1, a 3-hop 1.5, a 4-hop 2 (see README, "Rewards")."""
    return hops / 2


def parse_citations(text: str | None) -> list[str]:
    """Paragraph ids from a citations field such as "3, 7", "[3] [7]" or "3 and 7", in order, without repeats."""
    return list(dict.fromkeys(re.findall(r"\d+", text or "")))
