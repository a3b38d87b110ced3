"""The oracle retriever: always the supporting paragraphs, whatever the query (for debugging and upper bounds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlvr.retrieval.documents import Document, Hit, check_k


class GoldenRetriever:
    def __init__(self, docs: Sequence[Document], supporting_ids: Iterable[str]):
        wanted = set(supporting_ids)
        known = {d.id for d in docs}
        if missing := sorted(wanted - known):
            raise ValueError(
                f"GoldenRetriever: supporting ids {missing} are not among the {len(known)} documents; "
                "pass the ids of the question's supporting paragraphs"
            )
        self.golden = [d for d in docs if d.id in wanted]

    def search(self, query: str, k: int) -> list[Hit]:
        """The supporting documents in corpus order, at most k of them, each with score 1."""
        check_k(k)
        return [Hit(doc=d, score=1.0, rank=r) for r, d in enumerate(self.golden[:k], start=1)]
