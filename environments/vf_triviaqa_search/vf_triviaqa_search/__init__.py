"""vf-triviaqa-search: the MT-GRPO paper's TriviaQA search agent (Zeng et al. 2025, arXiv 2505.11821).

Answer a trivia question with one Wikipedia search: turn rewards for using the search tool well, outcome rewards
for the answer, scored per turn by rlvr's TurnRubric. Recipe: questions and corpus (data.py) -> BM25 search tool
(search.py) -> protocol (protocols.py) -> the paper's rewards (rewards.py) with their weights.
"""

from __future__ import annotations

from functools import partial

import verifiers as vf

from rlvr.retrieval import BM25Retriever
from rlvr.rubrics import TurnRubric
from rlvr.rubrics.rewards import tool_execution_reward, xml_format_reward
from vf_triviaqa_search.data import load_questions_and_corpus, to_dataset
from vf_triviaqa_search.protocols import PROTOCOLS, steps_sentence
from vf_triviaqa_search.rewards import (
    answer_contains_alias,
    answer_in_first_search_result,
    answer_required,
    exact_match,
    xml_tag_reward,
)
from vf_triviaqa_search.search import make_wiki_search


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
    outcome_needs_answer: bool = True,
    **kwargs,
) -> vf.Environment:
    if protocol not in PROTOCOLS:
        raise ValueError(f"vf-triviaqa-search: unknown protocol={protocol!r}; choose one of {tuple(PROTOCOLS)}")
    if max_turns < 2:
        raise ValueError(f"vf-triviaqa-search: max_turns={max_turns} leaves no turn to answer after a search; use >= 2")
    train_rows, eval_rows, docs = load_questions_and_corpus(
        dataset, data_path, corpus, num_train_examples, num_eval_examples, seed, world_seed, num_entities, relations
    )
    # One search tool over a BM25 index, built once per corpus content and cached on disk.
    wiki_search = make_wiki_search(BM25Retriever(docs, backend=bm25_backend, cache_dir=index_cache_dir), top_k, max_chars)
    how = PROTOCOLS[protocol]
    parser = how.parser()
    # The paper's rubric (Multi-Turn-RL-Agent verifiers/examples/triviaqa_search.py, rubrics/triviaqa_tool_rubric.py),
    # with the outcome of a rollout that never answers scored 0 unless outcome_needs_answer=False (issue 44).
    outcome = [(answer_contains_alias, 0.5), (exact_match, 1.0), (xml_format_reward, 0.2),
               (partial(xml_tag_reward, tags=how.tags), 0.2)]
    rubric = TurnRubric(
        turn_rewards=[(partial(tool_execution_reward, scale=1.0, tool_tag=how.tool_tag), 0.2),
                      (answer_in_first_search_result, 0.5)],
        outcome_rewards=[(answer_required(f), w) if outcome_needs_answer else (f, w) for f, w in outcome],
        parser=parser,
    )
    return how.env_class(
        tools=[wiki_search],
        max_turns=max_turns,
        dataset=to_dataset(train_rows),
        eval_dataset=to_dataset(eval_rows),
        system_prompt=how.system_prompt.format(steps=steps_sentence(max_turns)),
        parser=parser,
        rubric=rubric,
        **kwargs,
    )


__all__ = ["load_environment"]
