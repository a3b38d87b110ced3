"""vf-musique: multi-hop question answering by retrieval over the question's own paragraphs (MuSiQue setting).

The model calls `retrieve_documents(query)` for up to `max_turns` turns and answers with
<answer>...</answer><citations>paragraph ids</citations>. Scored by rlvr's TurnRubric: a turn reward for the
supporting paragraphs each turn newly retrieves, and an outcome reward that weighs answer F1 and citation F1 by
the question's hop count; EM/F1 follow MuSiQue's official evaluation, retrieval and citation precision/recall are
logged as metrics. Recipe: examples (data.py) -> tool environment (env.py) -> rewards (rewards.py) with weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import verifiers as vf

from rlvr.retrieval import KINDS
from rlvr.rubrics import TurnRubric
from rlvr.rubrics.parsing import XMLParser
from vf_musique import rewards
from vf_musique.data import load_examples, to_dataset
from vf_musique.env import MusiqueEnv

SYSTEM_PROMPT = """\
Answer the question, which takes several steps of reasoning, using only the paragraphs you find.
Call retrieve_documents with a short query for one step at a time; it returns the best paragraphs, each headed
by its id in brackets. Use each answer you find to write the next query. You have {max_turns} turns.
When you know the answer, reply without calling a tool, in this format:
<answer>the short answer only</answer>
<citations>the ids of the paragraphs you used, e.g. 3, 12</citations>"""


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
    if retriever not in KINDS:
        raise ValueError(f"vf-musique: unknown retriever={retriever!r}; choose one of {KINDS}")
    if max_turns < 2:
        raise ValueError(f"vf-musique: max_turns={max_turns} leaves no turn to answer after a search; use >= 2")
    train, eval_ = load_examples(dataset, data_path, hf_dataset, hf_name, hf_split, hops, num_train_examples,
                                 num_eval_examples, seed, world_seed, num_entities)
    parser = XMLParser(fields=["reasoning", "answer", "citations"], answer_field="answer")
    # Reward: hop-weighted answer + citation F1; a turn reward for newly retrieved supporting paragraphs;
    # MuSiQue's EM/F1 and retrieval/citation precision and recall are logged (weight 0).
    rubric = TurnRubric(
        turn_rewards=[(rewards.new_supporting_retrieved, turn_weight)],
        outcome_rewards=[(rewards.hop_weighted_reward, 1.0), (rewards.exact_match, 0.0), (rewards.token_f1, 0.0),
                         (rewards.retrieval_recall, 0.0), (rewards.retrieval_precision, 0.0),
                         (rewards.citation_precision, 0.0), (rewards.citation_recall, 0.0)],
        parser=parser,
    )
    return MusiqueEnv(
        retriever=retriever,
        retriever_kwargs=retriever_kwargs,
        top_k=top_k,
        max_turns=max_turns,
        dataset=to_dataset(train),
        eval_dataset=to_dataset(eval_),
        system_prompt=SYSTEM_PROMPT.format(max_turns=max_turns),
        parser=parser,
        rubric=rubric,
        **kwargs,
    )


__all__ = ["load_environment"]
