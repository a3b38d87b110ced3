"""The questions, each with its own paragraphs, as verifiers rows: synthetic (rlvr's fact world) or MuSiQue,
HotpotQA and 2WikiMultihopQA read by rlvr.data.multihop into one schema."""

from __future__ import annotations

import random
from collections.abc import Sequence

from datasets import Dataset

from rlvr.data.multihop import MultiHopExample, load_multihop_file, load_multihop_hf, synthetic_multihop

DATASETS = ("synthetic", "musique", "hotpotqa", "2wiki")


def to_dataset(examples: Sequence[MultiHopExample]) -> Dataset | None:
    """verifiers rows; `info` carries the aliases, hop count and the question's paragraphs. None for no examples."""
    if not examples:
        return None
    return Dataset.from_list([
        {
            "question": ex.question,
            "answer": ex.answer,
            "info": {
                "id": ex.id, "aliases": list(ex.aliases), "hops": ex.hops, "source": ex.source,
                "paragraphs": [{"idx": p.idx, "title": p.title, "text": p.text, "is_supporting": p.is_supporting}
                               for p in ex.paragraphs],
            },
            "task": "musique",
        }
        for ex in examples
    ])


def _load_original(dataset: str, data_path: str | None, hf_dataset: str | None, hf_name: str | None,
                   hf_split: str) -> list[MultiHopExample]:
    source = None if dataset == "musique" and data_path is None else dataset
    if data_path is not None:
        return load_multihop_file(data_path, source=source)
    if hf_dataset is not None:
        return load_multihop_hf(hf_dataset, hf_split, source=dataset, name=hf_name)
    raise ValueError(
        f"vf-musique: dataset={dataset!r} needs data_path=<local file in the original layout> or "
        "hf_dataset=<hub id with the original fields>; dataset='synthetic' needs neither"
    )


def load_examples(
    dataset: str,
    data_path: str | None,
    hf_dataset: str | None,
    hf_name: str | None,
    hf_split: str,
    hops: Sequence[int],
    num_train: int,
    num_eval: int,
    seed: int,
    world_seed: int,
    num_entities: int,
) -> tuple[list[MultiHopExample], list[MultiHopExample]]:
    """(train, eval) answerable examples after a seeded shuffle, eval first."""
    if dataset not in DATASETS:
        raise ValueError(f"vf-musique: unknown dataset={dataset!r}; choose one of {DATASETS}")
    if dataset == "synthetic":
        examples = synthetic_multihop(num_train + num_eval, hops, seed=seed, world_seed=world_seed,
                                      num_entities=num_entities)
    else:
        examples = _load_original(dataset, data_path, hf_dataset, hf_name, hf_split)
    examples = [ex for ex in examples if ex.answerable]  # MuSiQue-Full's unanswerable twins have no gold answer
    random.Random(seed).shuffle(examples)
    return examples[num_eval : num_eval + num_train], examples[:num_eval]
