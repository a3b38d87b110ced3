"""BM25 over a list of Documents, with bm25s (default: sparse-matrix BM25) or rank_bm25 as the backend."""

from __future__ import annotations

import functools
import pickle
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlvr.retrieval.cache import cache_key, cached_dir, index_root
from rlvr.retrieval.documents import Document, Hit, check_unique_ids, corpus_hash, top_k

BACKENDS = ("bm25s", "rank_bm25")
# scikit-learn CountVectorizer's default token pattern, which bm25s.tokenize uses too.
_TOKEN = re.compile(r"(?u)\b\w\w+\b")
_TOKENIZER_VERSION = 1  # bump when `tokenize` changes: it is part of every cache key


@functools.cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without English stop words; the same for both backends so they rank alike."""
    stopwords = _stopwords()
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


def document_text(doc: Document) -> str:
    """What gets indexed: the title matters for multi-hop questions, which name entities by title."""
    return f"{doc.title}\n{doc.text}" if doc.title else doc.text


class BM25Retriever:
    """Okapi BM25 (Robertson & Zaragoza 2009, "The Probabilistic Relevance Framework: BM25 and Beyond"),
    in the two variants of Kamphuis et al. 2020, "Which BM25 Do You Mean?" (ECIR), k1=1.5, b=0.75 by default:

    backend="bm25s" (Lù 2024, arXiv 2407.03618; method="lucene", bm25s/scoring.py):
        score = sum_t log(1 + (N - df + 0.5) / (df + 0.5)) * tf / (tf + k1 * (1 - b + b * |d| / avgdl))
    backend="rank_bm25" (rank_bm25.BM25Okapi):
        score = sum_t idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl)),
        idf = log((N - df + 0.5) / (df + 0.5)), negative idf replaced by 0.25 * mean idf.
    Documents sharing no term with the query are not returned.

    The index is cached under `cache_dir` (default `$RLVR_HOME/index`) keyed by the corpus content hash, the
    backend, k1, b and the tokenizer version; pass cache=False for small throw-away pools (e.g. one question's
    paragraphs), where building costs less than touching the disk.
    """

    def __init__(
        self,
        docs: Sequence[Document],
        backend: str = "bm25s",
        cache_dir: str | Path | None = None,
        *,
        k1: float = 1.5,
        b: float = 0.75,
        cache: bool = True,
    ):
        if backend not in BACKENDS:
            raise ValueError(f"BM25Retriever: unknown backend {backend!r}; choose one of {BACKENDS}")
        if not docs:
            raise ValueError("BM25Retriever: empty corpus; pass at least one Document")
        check_unique_ids(docs)
        self.docs = list(docs)
        self.backend = backend
        key = cache_key(
            corpus=corpus_hash(self.docs), backend=backend, k1=k1, b=b, tokenizer=_TOKENIZER_VERSION
        )
        self.index_dir: Path | None = None
        if cache:
            self.index_dir = cached_dir(
                index_root(cache_dir), f"bm25-{backend}-{key}", lambda d: self._build(d, k1, b)
            )
            self._index = self._load(self.index_dir)
        else:
            self._index = self._fit(k1, b)

    def _fit(self, k1: float, b: float):
        corpus_tokens = [tokenize(document_text(d)) for d in self.docs]
        if self.backend == "bm25s":
            import bm25s

            index = bm25s.BM25(k1=k1, b=b, method="lucene")
            index.index(corpus_tokens, show_progress=False)
            return index
        from rank_bm25 import BM25Okapi

        # rank_bm25 divides by the average document length: give empty documents one dummy token.
        return BM25Okapi([tokens or [""] for tokens in corpus_tokens], k1=k1, b=b)

    def _build(self, directory: Path, k1: float, b: float) -> None:
        index = self._fit(k1, b)
        if self.backend == "bm25s":
            index.save(directory, show_progress=False)
        else:
            with (directory / "bm25okapi.pkl").open("wb") as f:
                pickle.dump(index, f)

    def _load(self, directory: Path):
        if self.backend == "bm25s":
            import bm25s

            return bm25s.BM25.load(directory, show_progress=False)
        with (directory / "bm25okapi.pkl").open("rb") as f:
            return pickle.load(f)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (corpus order); -inf where the document shares no query term."""
        tokens = tokenize(query)
        if not tokens:
            return np.full(len(self.docs), -np.inf)
        raw = np.asarray(self._index.get_scores(tokens), dtype=np.float64)
        if self.backend == "bm25s":
            # Lucene idf is > 0 for every indexed term, so a score > 0 means at least one shared term.
            matched = raw > 0
        else:
            # Okapi idf can be <= 0 (terms in over half the documents): test term overlap directly.
            matched = np.array([any(t in freqs for t in tokens) for freqs in self._index.doc_freqs])
        return np.where(matched, raw, -np.inf)

    def search(self, query: str, k: int) -> list[Hit]:
        return top_k(self.docs, self.scores(query), k)
