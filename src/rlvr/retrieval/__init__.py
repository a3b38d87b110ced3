"""Retrieval for the search environments: Documents, corpus loading, BM25 / dense / hybrid / golden retrievers.

docs = load_corpus(path)                       # wiki-18, KILT, or {title, text} lists
retriever = build_retriever("bm25", docs)      # "bm25" | "semantic" | "hybrid" | "golden"
hits = retriever.search("who founded ...", k=5)  # [Hit(doc, score, rank)], best first
"""

from __future__ import annotations

from collections.abc import Sequence

from rlvr.retrieval.bm25 import BM25Retriever
from rlvr.retrieval.dense import DEFAULT_MODEL, DenseRetriever
from rlvr.retrieval.documents import CorpusFormatError, Document, Hit, Retriever, corpus_hash, load_corpus
from rlvr.retrieval.golden import GoldenRetriever
from rlvr.retrieval.hybrid import (
    HybridRetriever,
    min_max_normalize,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)

KINDS = ("bm25", "semantic", "hybrid", "golden")
_HYBRID_KEYS = ("fusion", "rrf_k", "dense_weight", "depth")
_BM25_KEYS = ("backend", "k1", "b")
_DENSE_KEYS = ("model", "device", "batch_size")
_SHARED_KEYS = ("cache", "cache_dir")


def build_retriever(kind: str, docs: Sequence[Document], **kwargs) -> Retriever:
    """Build a retriever by name. Keyword arguments go to the matching class; for "hybrid", BM25 keys
    (backend, k1, b), dense keys (model, device, batch_size) and fusion keys (fusion, rrf_k, dense_weight, depth)
    are routed to their parts; "golden" needs supporting_ids."""
    if kind == "bm25":
        return BM25Retriever(docs, **kwargs)
    if kind == "semantic":
        return DenseRetriever(docs, **kwargs)
    if kind == "golden":
        return GoldenRetriever(docs, **kwargs)
    if kind == "hybrid":
        allowed = _HYBRID_KEYS + _BM25_KEYS + _DENSE_KEYS + _SHARED_KEYS
        if unknown := sorted(set(kwargs) - set(allowed)):
            raise TypeError(
                f"build_retriever('hybrid'): unknown arguments {unknown}; allowed: {sorted(allowed)}"
            )

        def pick(keys: tuple[str, ...]) -> dict:
            return {key: kwargs[key] for key in keys + _SHARED_KEYS if key in kwargs}

        sparse = BM25Retriever(docs, **pick(_BM25_KEYS))
        dense = DenseRetriever(docs, **pick(_DENSE_KEYS))
        return HybridRetriever(sparse, dense, **{k: kwargs[k] for k in _HYBRID_KEYS if k in kwargs})
    raise ValueError(f"build_retriever: unknown retriever kind {kind!r}; choose one of {KINDS}")


__all__ = [
    "DEFAULT_MODEL",
    "KINDS",
    "BM25Retriever",
    "CorpusFormatError",
    "DenseRetriever",
    "Document",
    "GoldenRetriever",
    "Hit",
    "HybridRetriever",
    "Retriever",
    "build_retriever",
    "corpus_hash",
    "load_corpus",
    "min_max_normalize",
    "reciprocal_rank_fusion",
    "weighted_score_fusion",
]
