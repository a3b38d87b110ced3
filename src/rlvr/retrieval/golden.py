"""The oracle retriever: always the supporting paragraphs, whatever the query (for debugging and upper bounds)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rlvr.retrieval.documents import Document, Hit, check_k


class GoldenRetriever:
    """Returns every supporting paragraph of the question on every search.

    `k` is checked but does not cut the list: an oracle that stopped at `top_k` would hide a hop of the questions
    with more supporting paragraphs than `top_k` (4-hop 2WikiMultihopQA and MuSiQue questions under the usual
    top_k=3), and the upper bound it stands for would not be one.
    """

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
        """All supporting documents in corpus order, each with score 1, however small `k` is."""
        check_k(k)
        return [Hit(doc=d, score=1.0, rank=r) for r, d in enumerate(self.golden, start=1)]
