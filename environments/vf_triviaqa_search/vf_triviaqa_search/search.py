"""The `wiki_search` tool over a local corpus."""

from __future__ import annotations

from collections.abc import Callable

from rlvr.retrieval import Document, Retriever

NO_HITS = "No relevant Wikipedia content found."
MAX_QUERY_CHARS = 1_000  # a query is a name or a few keywords; a 200 KB one would only cost BM25 time


def format_passage(doc: Document, max_chars: int) -> str:
    """A passage as the model sees it: its title on the first line (as wiki-18 stores it), cut to `max_chars`."""
    passage = f"{doc.title}\n{doc.text}" if doc.title else doc.text
    return passage if len(passage) <= max_chars else passage[:max_chars].rstrip() + " ..."


def make_wiki_search(retriever: Retriever, top_k: int = 1, max_chars: int = 1000) -> Callable[[str], str]:
    """A search tool returning the `top_k` best passages (the MT-GRPO original returns the top 1,
    SiliangZeng/Multi-Turn-RL-Agent verifiers/tools/local_wiki_search.py)."""
    if top_k < 1:
        raise ValueError(f"wiki_search: top_k must be >= 1, got {top_k}")
    if max_chars < 1:
        raise ValueError(f"wiki_search: max_chars must be >= 1, got {max_chars}")

    def wiki_search(query: str) -> str:
        """Search Wikipedia and return the text of the best matching article passage.

        Args:
            query: What to search for, e.g. an entity name or a few keywords.
        """
        if isinstance(query, str) and len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"wiki_search: the query has {len(query):,} characters; write a name or a few keywords "
                             f"(at most {MAX_QUERY_CHARS:,} characters)")
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"wiki_search: 'query' must be a non-empty string, got {query!r}")
        hits = retriever.search(query, k=top_k)
        if not hits:
            return NO_HITS
        return "\n\n".join(format_passage(hit.doc, max_chars) for hit in hits)

    return wiki_search
