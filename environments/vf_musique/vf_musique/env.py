"""The tool environment: `retrieve_documents(query)` over the current question's own paragraphs only.

Native tool calls through rlvr.tools.GuardedToolEnv: a bad call (invalid or nested JSON, an unknown tool, a missing or
misnamed argument, an empty or over-long query) is answered with a tool message "Error: ..." saying what to fix.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

from rlvr.retrieval import Document, Retriever, build_retriever
from rlvr.tools import GuardedToolEnv

NO_MATCH = "No paragraph matches this query. Try other keywords, e.g. a name from the question."
MAX_QUERY_CHARS = 1_000  # one step of a question is a few keywords


def question_documents(info: dict[str, Any]) -> list[Document]:
    """The question's paragraphs as Documents whose id is MuSiQue's paragraph `idx` (what citations name)."""
    return [Document(id=str(p["idx"]), title=p["title"], text=p["text"]) for p in info["paragraphs"]]


def supporting_ids(info: dict[str, Any]) -> list[str]:
    return [str(p["idx"]) for p in info["paragraphs"] if p["is_supporting"]]


def format_hits(docs: list[Document], max_chars: int) -> str:
    return "\n\n".join(f"[{d.id}] {d.title}\n{d.text[:max_chars]}" for d in docs) if docs else NO_MATCH


class MusiqueEnv(GuardedToolEnv):
    """Native tool calling with one tool; the rollout ends when the model replies without a tool call (its answer)
    or after `max_turns` turns. At most `max_calls_per_turn` (default 4) searches of one turn run. State:
    `retrievals` [{turn, query, ids}] and `retrieved_ids` (first-seen order)."""

    def __init__(
        self,
        retriever: str = "bm25",
        retriever_kwargs: dict[str, Any] | None = None,
        top_k: int = 3,
        max_chars: int = 1500,
        max_turns: int = 10,
        **kwargs,
    ):
        super().__init__(tools=[], max_turns=max_turns, **kwargs)
        self.retriever_kind = retriever
        self.retriever_kwargs = dict(retriever_kwargs or {})
        self.top_k, self.max_chars = top_k, max_chars
        # One small index per question, built on its first search; a question's pool is ~10-20 paragraphs, so
        # the on-disk cache (for large corpora) is off by default here.
        self._retrievers: dict[str, Retriever] = {}
        self.add_tool(self.retrieve_documents, args_to_skip=["state"])

    def retriever_for(self, info: dict[str, Any]) -> Retriever:
        key = info["id"]
        if key not in self._retrievers:
            docs = question_documents(info)
            if self.retriever_kind == "golden":
                kwargs = {"supporting_ids": supporting_ids(info)}
            else:
                kwargs = {"cache": False, **self.retriever_kwargs}
            self._retrievers[key] = build_retriever(self.retriever_kind, docs, **kwargs)
        return self._retrievers[key]

    async def setup_state(self, state: vf.State) -> vf.State:
        state["retrievals"] = []
        state["retrieved_ids"] = []
        return await super().setup_state(state)

    def update_tool_args(
        self, tool_name: str, tool_args: dict, messages: vf.Messages, state: vf.State, **kwargs
    ):
        return {**tool_args, "state": state}

    def retrieve_documents(self, query: str, state: vf.State) -> str:
        """Search the paragraphs available for this question.

        Args:
            query: What to look for: a name or a few keywords of one step of the question.

        Returns:
            The best-matching paragraphs, each headed by its id in brackets and its title. Cite these ids.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError('retrieve_documents needs a non-empty "query" string, e.g. {"query": "Ada Lovelace"}')
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"the query has {len(query):,} characters; search one step of the question with a few "
                             f"keywords (at most {MAX_QUERY_CHARS:,} characters)")
        docs = [hit.doc for hit in self.retriever_for(state["info"]).search(query, self.top_k)]
        ids = [d.id for d in docs]
        # The step of the assistant turn that made this call is already in the trajectory.
        state["retrievals"].append({"turn": len(state["trajectory"]) - 1, "query": query, "ids": ids})
        state["retrieved_ids"] = list(dict.fromkeys(state["retrieved_ids"] + ids))
        return format_hits(docs, self.max_chars)
