"""vf-triviaqa-search: the MT-GRPO paper's TriviaQA search agent (Zeng et al. 2025, arXiv 2505.11821).

Answer a trivia question with one Wikipedia search: turn rewards for using the search tool well, outcome
rewards for the answer, combined per turn by rlvr's TurnRubric (MT-GRPO credit by default).
"""

from __future__ import annotations

import random
from functools import partial

import verifiers as vf
from datasets import Dataset

from rlvr.data.factworld import FactWorld
from rlvr.retrieval import BM25Retriever, load_corpus
from rlvr.rubrics import TurnRubric
from rlvr.rubrics.rewards import tool_execution_reward, xml_format_reward
from vf_triviaqa_search.data import load_triviaqa_file, load_triviaqa_hf, synthetic_questions
from vf_triviaqa_search.protocols import (
    SEARCH_TAGS,
    XML_TAGS,
    NativeToolEnv,
    SearchTagEnv,
    XMLToolEnv,
    search_parser,
    xml_parser,
)
from vf_triviaqa_search.rewards import (
    answer_contains_alias,
    answer_in_first_search_result,
    exact_match,
    xml_tag_reward,
)
from vf_triviaqa_search.search import make_wiki_search

DATASETS = ("synthetic", "hf", "jsonl")
PROTOCOLS = ("xml", "native", "search")

XML_PROMPT = """\
Answer the question. You can search Wikipedia with this tool:

wiki_search: returns the best matching Wikipedia passage.
  args: {{"query": "<what to search for, e.g. a name or a few keywords>"}}

{steps}
Format:
1. Think inside <reasoning> tags.
2. To search, write a JSON command inside <tool> tags, e.g.
   <tool>{{"name": "wiki_search", "args": {{"query": "Ada Lovelace"}}}}</tool>
   The search result comes back inside <result> tags.
3. Think about the result inside <reasoning> tags, then give only the answer (a name, place, year or short
   phrase) inside <answer> tags."""

NATIVE_PROMPT = """\
Answer the question. Search Wikipedia with the wiki_search tool.
{steps}
Think inside <reasoning> tags, then give only the answer (a name, place, year or short phrase) inside
<answer> tags."""


SEARCH_PROMPT = """\
Answer the question. You can search an encyclopedia: write <search>a name or keywords</search> and the
result comes back inside <result> tags. {steps} Give only the answer inside <answer> tags."""

# One worked exchange about an entity that is not in any world: small models copy the format from it.
SEARCH_FEW_SHOT = [
    {"role": "user", "content": "What is the capital of Velmora?"},
    {"role": "assistant", "content": "<search>Velmora</search>"},
    {"role": "user", "content": "<result>\nVelmora is a country. The capital of Velmora is Ostrikan.\n</result>"},
    {"role": "assistant", "content": "<answer>Ostrikan</answer>"},
]


def _steps(max_turns: int) -> str:
    # The original prompt asks for exactly one search (max_steps=2); allow more when the turn budget does.
    if max_turns == 2:
        return "Search exactly once, then answer, even if the result does not help."
    return f"Search up to {max_turns - 1} times, then answer."


def _split(rows: list[dict], num_train: int, num_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded shuffle, the first `num_eval` rows for evaluation, the next `num_train` (-1: all) for training."""
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    eval_rows, train_rows = rows[:num_eval], rows[num_eval:]
    return (train_rows if num_train < 0 else train_rows[:num_train]), eval_rows


def _to_dataset(rows: list[dict]) -> Dataset:
    return Dataset.from_list(
        [
            {
                "question": r["question"],
                "answer": r["answer"],
                "info": {"id": r["id"], "aliases": r["aliases"]},
                "task": "triviaqa-search",
            }
            for r in rows
        ]
    )


def load_environment(
    dataset: str = "synthetic",
    data_path: str | None = None,
    corpus: str | None = None,
    protocol: str = "xml",
    max_turns: int = 2,
    top_k: int = 1,
    max_chars: int = 1000,
    bm25_backend: str = "bm25s",
    index_cache_dir: str | None = None,
    num_train_examples: int = 800,
    num_eval_examples: int = 100,
    seed: int = 0,
    world_seed: int = 0,
    num_entities: int = 300,
    relations: list[str] | None = None,
    **kwargs,
) -> vf.Environment:
    if dataset not in DATASETS:
        raise ValueError(f"vf-triviaqa-search: unknown dataset={dataset!r}; choose one of {DATASETS}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"vf-triviaqa-search: unknown protocol={protocol!r}; choose one of {PROTOCOLS}")
    if max_turns < 2:
        raise ValueError(f"vf-triviaqa-search: max_turns={max_turns} leaves no turn to answer after a search; use >= 2")

    # Questions and the corpus that answers them.
    if dataset == "synthetic":
        if corpus not in (None, "synthetic"):
            raise ValueError(
                f"vf-triviaqa-search: dataset='synthetic' is answerable only from its own corpus, got corpus={corpus!r}; "
                "leave corpus unset, or use dataset='jsonl'/'hf' with a corpus file"
            )
        world = FactWorld.generate(seed=world_seed, num_entities=num_entities)
        wanted = None if num_train_examples < 0 else num_train_examples + num_eval_examples
        rows = synthetic_questions(world, wanted, seed, relations)
        train_rows, eval_rows = _split(rows, num_train_examples, num_eval_examples, seed)
        docs = world.documents()
    else:
        if corpus in (None, "synthetic"):
            raise ValueError(
                f"vf-triviaqa-search: dataset={dataset!r} needs corpus=<path to a wiki-18 or KILT JSONL file>"
            )
        if dataset == "jsonl":
            if data_path is None:
                raise ValueError("vf-triviaqa-search: dataset='jsonl' needs data_path=<TriviaQA file>")
            train_rows, eval_rows = _split(load_triviaqa_file(data_path), num_train_examples, num_eval_examples, seed)
        else:
            train_rows = _split(load_triviaqa_hf("train"), num_train_examples, 0, seed)[0]
            eval_rows = _split(load_triviaqa_hf("validation"), num_eval_examples, 0, seed)[0]
        docs = load_corpus(corpus)

    # One search tool over a BM25 index, built once per corpus content and cached on disk.
    retriever = BM25Retriever(docs, backend=bm25_backend, cache_dir=index_cache_dir)
    wiki_search = make_wiki_search(retriever, top_k=top_k, max_chars=max_chars)

    # Rewards of the MT-GRPO paper (Multi-Turn-RL-Agent verifiers/examples/triviaqa_search.py and
    # verifiers/rubrics/triviaqa_tool_rubric.py): turn = tool execution 0.2 x successful/attempted + answer in
    # the search result 0.5; outcome = alias in answer 0.5 + exact match 1.0 + 0.2 x format + 0.2 x XML tags.
    parser = {"xml": xml_parser, "native": lambda: vf.XMLParser(fields=["reasoning", "answer"]),
              "search": search_parser}[protocol]()
    tool_tag, tags = ("search", SEARCH_TAGS) if protocol == "search" else ("tool", XML_TAGS)
    rubric = TurnRubric(
        turn_rewards=[(partial(tool_execution_reward, scale=1.0, tool_tag=tool_tag), 0.2),
                      (answer_in_first_search_result, 0.5)],
        outcome_rewards=[(answer_contains_alias, 0.5), (exact_match, 1.0), (xml_format_reward, 0.2),
                         (partial(xml_tag_reward, tags=tags), 0.2)],
        parser=parser,
    )

    env_cls, prompt = {"xml": (XMLToolEnv, XML_PROMPT), "native": (NativeToolEnv, NATIVE_PROMPT),
                       "search": (SearchTagEnv, SEARCH_PROMPT)}[protocol]
    if protocol == "search":
        kwargs.setdefault("few_shot", SEARCH_FEW_SHOT)
    return env_cls(
        tools=[wiki_search],
        max_turns=max_turns,
        dataset=_to_dataset(train_rows) if train_rows else None,
        eval_dataset=_to_dataset(eval_rows) if eval_rows else None,
        system_prompt=prompt.format(steps=_steps(max_turns)),
        parser=parser,
        rubric=rubric,
        **kwargs,
    )


__all__ = ["load_environment"]
