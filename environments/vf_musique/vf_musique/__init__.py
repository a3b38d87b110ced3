"""vf-musique: multi-hop question answering by retrieval over the question's own paragraphs (MuSiQue setting).

The model calls `retrieve_documents(query)` for up to `max_turns` turns and answers with
<answer>...</answer><citations>paragraph ids</citations>. Scored by rlvr's TurnRubric: a turn reward for the
supporting paragraphs each turn newly retrieves, and an outcome reward that weighs answer F1 and citation F1 by
the question's hop count; EM/F1 follow MuSiQue's official evaluation, retrieval and citation precision/recall are
logged as metrics.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import verifiers as vf
from datasets import Dataset

from rlvr.data.multihop import MultiHopExample, load_multihop_file, load_multihop_hf, synthetic_multihop
from rlvr.retrieval import KINDS
from rlvr.rubrics import TurnRubric
from vf_musique.env import MusiqueEnv
from vf_musique.rewards import (
    citation_precision,
    citation_recall,
    exact_match,
    hop_weighted_reward,
    new_supporting_retrieved,
    retrieval_precision,
    retrieval_recall,
    token_f1,
)

DATASETS = ("synthetic", "musique", "hotpotqa", "2wiki")

SYSTEM_PROMPT = """\
Answer the question, which takes several steps of reasoning, using only the paragraphs you find.
Call retrieve_documents with a short query for one step at a time; it returns the best paragraphs, each headed
by its id in brackets. Use each answer you find to write the next query. You have {max_turns} turns.
When you know the answer, reply without calling a tool, in this format:
<answer>the short answer only</answer>
<citations>the ids of the paragraphs you used, e.g. 3, 12</citations>"""


def _rows(examples: Sequence[MultiHopExample]) -> Dataset:
    return Dataset.from_list(
        [
            {
                "question": ex.question,
                "answer": ex.answer,
                "info": {
                    "id": ex.id,
                    "aliases": list(ex.aliases),
                    "hops": ex.hops,
                    "source": ex.source,
                    "paragraphs": [
                        {"idx": p.idx, "title": p.title, "text": p.text, "is_supporting": p.is_supporting}
                        for p in ex.paragraphs
                    ],
                },
                "task": "musique",
            }
            for ex in examples
        ]
    )


def _load_examples(
    dataset: str, data_path: str | None, hf_dataset: str | None, hf_name: str | None, hf_split: str
) -> list[MultiHopExample]:
    source = None if dataset == "musique" and data_path is None else dataset
    if data_path is not None:
        return load_multihop_file(data_path, source=source)
    if hf_dataset is not None:
        return load_multihop_hf(hf_dataset, hf_split, source=dataset, name=hf_name)
    raise ValueError(
        f"vf-musique: dataset={dataset!r} needs data_path=<local file in the original layout> or "
        "hf_dataset=<hub id with the original fields>; dataset='synthetic' needs neither"
    )


def load_environment(
    dataset: str = "synthetic",
    data_path: str | None = None,
    hf_dataset: str | None = None,
    hf_name: str | None = None,
    hf_split: str = "validation",
    retriever: str = "bm25",
    retriever_kwargs: dict | None = None,
    top_k: int = 3,
    max_turns: int = 10,
    hops: Sequence[int] = (2, 3, 4),
    num_train_examples: int = 200,
    num_eval_examples: int = 50,
    seed: int = 0,
    world_seed: int = 0,
    num_entities: int = 300,
    turn_weight: float = 0.5,
    **kwargs,
) -> vf.Environment:
    if dataset not in DATASETS:
        raise ValueError(f"vf-musique: unknown dataset={dataset!r}; choose one of {DATASETS}")
    if retriever not in KINDS:
        raise ValueError(f"vf-musique: unknown retriever={retriever!r}; choose one of {KINDS}")
    if max_turns < 2:
        raise ValueError(
            f"vf-musique: max_turns={max_turns} leaves no turn to answer after a search; use >= 2"
        )

    # Questions, each carrying its own paragraphs: the tool searches only those.
    if dataset == "synthetic":
        examples = synthetic_multihop(
            num_train_examples + num_eval_examples,
            hops,
            seed=seed,
            world_seed=world_seed,
            num_entities=num_entities,
        )
    else:
        examples = _load_examples(dataset, data_path, hf_dataset, hf_name, hf_split)
    examples = [
        ex for ex in examples if ex.answerable
    ]  # MuSiQue-Full's unanswerable twins have no gold answer
    random.Random(seed).shuffle(examples)
    eval_examples = examples[:num_eval_examples]
    train_examples = examples[num_eval_examples : num_eval_examples + num_train_examples]

    parser = vf.XMLParser(fields=["reasoning", "answer", "citations"], answer_field="answer")
    # Reward: hop-weighted answer + citation F1 (weight 1), turn reward for newly retrieved supporting
    # paragraphs (turn_weight); EM, F1, retrieval and citation precision/recall are metrics (weight 0).
    rubric = TurnRubric(
        turn_rewards=[(new_supporting_retrieved, turn_weight)],
        outcome_rewards=[
            (hop_weighted_reward, 1.0),
            (exact_match, 0.0),
            (token_f1, 0.0),
            (retrieval_recall, 0.0),
            (retrieval_precision, 0.0),
            (citation_precision, 0.0),
            (citation_recall, 0.0),
        ],
        parser=parser,
    )
    return MusiqueEnv(
        retriever=retriever,
        retriever_kwargs=retriever_kwargs,
        top_k=top_k,
        max_turns=max_turns,
        dataset=_rows(train_examples) if train_examples else None,
        eval_dataset=_rows(eval_examples) if eval_examples else None,
        system_prompt=SYSTEM_PROMPT.format(max_turns=max_turns),
        parser=parser,
        rubric=rubric,
        **kwargs,
    )


__all__ = ["load_environment"]
