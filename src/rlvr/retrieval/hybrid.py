"""Hybrid retrieval: fuse a sparse and a dense ranking by reciprocal rank or by normalised score."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlvr.retrieval.documents import Document, Hit, Retriever, check_k

FUSIONS = ("rrf", "weighted")


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], k: float = 60.0) -> dict[str, float]:
    """RRF(d) = sum over rankings r of 1 / (k + rank_r(d)), rank 1-based; a ranking without d adds nothing.

    Cormack, Clarke & Buettcher, "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning
    Methods", SIGIR 2009, section 2 (k = 60 there).
    """
    if k < 0:
        raise ValueError(f"reciprocal_rank_fusion: k must be >= 0, got {k}")
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking, start=1):
            fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (k + rank)
    return fused


def min_max_normalize(scores: Mapping[str, float]) -> dict[str, float]:
    """(s - min) / (max - min) over one result list; all-equal scores map to 1.0 (each is that list's best).

    The min-max normalisation of Lee (1997), "Analyses of multiple evidence combination", SIGIR, as used
    for score fusion in Fox & Shaw's CombSUM family.
    """
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi == lo:
        return dict.fromkeys(scores, 1.0)
    return {d: (s - lo) / (hi - lo) for d, s in scores.items()}


def weighted_score_fusion(
    score_lists: Sequence[Mapping[str, float]], weights: Sequence[float]
) -> dict[str, float]:
    """CombSUM with weights over min-max-normalised lists: sum_i w_i * norm_i(d); a list without d adds 0."""
    if len(score_lists) != len(weights):
        raise ValueError(f"weighted_score_fusion: {len(score_lists)} score lists but {len(weights)} weights")
    fused: dict[str, float] = {}
    for scores, weight in zip(score_lists, weights, strict=True):
        for doc_id, s in min_max_normalize(scores).items():
            fused[doc_id] = fused.get(doc_id, 0.0) + weight * s
    return fused


class HybridRetriever:
    """Retrieve `depth` candidates from each retriever and fuse: fusion="rrf" (rrf_k, default 60) or
    fusion="weighted" (dense_weight * dense + (1 - dense_weight) * sparse, each min-max normalised)."""

    def __init__(
        self,
        sparse: Retriever,
        dense: Retriever,
        fusion: str = "rrf",
        *,
        rrf_k: float = 60.0,
        dense_weight: float = 0.5,
        depth: int = 50,
    ):
        if fusion not in FUSIONS:
            raise ValueError(f"HybridRetriever: unknown fusion {fusion!r}; choose one of {FUSIONS}")
        if not 0.0 <= dense_weight <= 1.0:
            raise ValueError(f"HybridRetriever: dense_weight must be in [0, 1], got {dense_weight}")
        check_k(depth)
        self.sparse, self.dense = sparse, dense
        self.fusion, self.rrf_k, self.dense_weight, self.depth = fusion, rrf_k, dense_weight, depth

    def search(self, query: str, k: int) -> list[Hit]:
        check_k(k)
        depth = max(k, self.depth)
        hit_lists = [self.sparse.search(query, depth), self.dense.search(query, depth)]
        docs: dict[str, Document] = {h.doc.id: h.doc for hits in hit_lists for h in hits}
        if self.fusion == "rrf":
            fused = reciprocal_rank_fusion([[h.doc.id for h in hits] for hits in hit_lists], k=self.rrf_k)
        else:
            fused = weighted_score_fusion(
                [{h.doc.id: h.score for h in hits} for hits in hit_lists],
                [1.0 - self.dense_weight, self.dense_weight],
            )
        # sorted() is stable and `docs` keeps first-seen order (sparse first), so ties are deterministic.
        best = sorted(docs, key=lambda d: -fused[d])[:k]
        return [Hit(doc=docs[d], score=fused[d], rank=r) for r, d in enumerate(best, start=1)]
