"""TriviaQA questions with all their answer aliases, from the hub, from local files, or from a FactWorld.

Every loader returns rows {"id", "question", "answer", "aliases"}: `answer` is the canonical answer and
`aliases` every accepted string (the canonical one first), which the rewards match after TriviaQA's
normalisation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from datasets import Dataset

from rlvr.data.factworld import FactWorld
from rlvr.retrieval import Document, load_corpus

HF_DATASET = ("mandarjoshi/trivia_qa", "rc")


def _unique(values: list[Any]) -> list[str]:
    return list(dict.fromkeys(str(v) for v in values if str(v).strip()))


def from_hf_row(row: dict, where: str) -> dict:
    """A row of the hub dataset (`answer` = {value, aliases, normalized_aliases, ...})."""
    answer = row.get("answer")
    if not isinstance(answer, dict) or "value" not in answer:
        raise ValueError(f"{where}: expected 'answer' to be an object with 'value' and 'aliases' (hub layout)")
    aliases = _unique([answer["value"], *answer.get("aliases", []), *answer.get("normalized_aliases", [])])
    return {"id": str(row.get("question_id", where)), "question": row["question"], "answer": aliases[0], "aliases": aliases}


def _from_selfrag_row(row: dict, where: str) -> dict:
    """A Self-RAG / CtrlA style record: {"id", "question", "answers": [aliases...]}; the first alias is the answer."""
    aliases = _unique(row["answers"])
    if not aliases:
        raise ValueError(f"{where}: 'answers' is empty; every question needs at least one accepted answer")
    return {"id": str(row.get("id", where)), "question": row["question"], "answer": aliases[0], "aliases": aliases}


def _from_official_item(item: dict, where: str) -> dict:
    """An item of the official RC file's "Data" list: {"Question", "QuestionId", "Answer": {"Value", "Aliases", ...}}."""
    answer = item["Answer"]
    aliases = _unique([answer["Value"], *answer.get("Aliases", []), *answer.get("NormalizedAliases", [])])
    return {"id": str(item.get("QuestionId", where)), "question": item["Question"], "answer": aliases[0], "aliases": aliases}


_LAYOUTS = (
    'official RC JSON {"Data": [{"Question", "Answer": {"Value", "Aliases"}}]}; '
    'JSONL {"question", "answers": [...]} (Self-RAG); JSONL {"question", "answer": {"value", "aliases"}} (hub rows)'
)


def load_triviaqa_file(path: str | Path) -> list[dict]:
    """Questions from a local file in the official RC layout or as JSON Lines (Self-RAG records or hub rows)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"TriviaQA file not found: {path} (dataset='jsonl' needs data_path=<file>)")
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None  # JSON Lines: several documents
    if isinstance(whole, dict) and isinstance(whole.get("Data"), list):
        return [_from_official_item(item, f"{path}: Data[{i}]") for i, item in enumerate(whole["Data"])]

    rows = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg}); supported layouts: {_LAYOUTS}") from e
        if isinstance(record, dict) and "question" in record and isinstance(record.get("answers"), list):
            rows.append(_from_selfrag_row(record, where))
        elif isinstance(record, dict) and "question" in record and isinstance(record.get("answer"), dict):
            rows.append(from_hf_row(record, where))
        else:
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise ValueError(f"{where}: unsupported TriviaQA record (keys: {keys}); supported layouts: {_LAYOUTS}")
    if not rows:
        raise ValueError(f"{path}: no questions found; supported layouts: {_LAYOUTS}")
    return rows


def load_triviaqa_hf(split: str) -> list[dict]:
    """The hub dataset (needs network or a filled Hugging Face cache)."""
    from datasets import load_dataset

    ds = load_dataset(*HF_DATASET, split=split)
    return [from_hf_row(row, f"{HF_DATASET[0]}[{split}][{i}]") for i, row in enumerate(ds)]


def synthetic_questions(world: FactWorld, n: int | None, seed: int, relations: list[str] | None) -> list[dict]:
    """`n` (None: all) single-hop questions about a FactWorld, answerable only by searching its corpus."""
    return [
        {"id": q["id"], "question": q["question"], "answer": q["answer"], "aliases": q["aliases"]}
        for q in world.single_hop_questions(n, seed=seed, relations=relations)
    ]


DATASETS = ("synthetic", "hf", "jsonl")


def split(rows: list[dict], num_train: int, num_eval: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded shuffle, the first `num_eval` rows for evaluation, the next `num_train` (-1: all) for training."""
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    eval_rows, train_rows = rows[:num_eval], rows[num_eval:]
    return (train_rows if num_train < 0 else train_rows[:num_train]), eval_rows


def to_dataset(rows: list[dict]) -> Dataset | None:
    """verifiers rows (question, answer, info with the aliases); None for no rows."""
    if not rows:
        return None
    return Dataset.from_list([
        {"question": r["question"], "answer": r["answer"], "info": {"id": r["id"], "aliases": r["aliases"]},
         "task": "triviaqa-search"}
        for r in rows
    ])


def load_questions_and_corpus(
    dataset: str,
    data_path: str | None,
    corpus: str | None,
    num_train: int,
    num_eval: int,
    seed: int,
    world_seed: int,
    num_entities: int,
    relations: list[str] | None,
) -> tuple[list[dict], list[dict], list[Document]]:
    """(train rows, eval rows, the passages that answer them) for `dataset` (see the README's Data table)."""
    if dataset not in DATASETS:
        raise ValueError(f"vf-triviaqa-search: unknown dataset={dataset!r}; choose one of {DATASETS}")
    if dataset == "synthetic":
        if corpus not in (None, "synthetic"):
            raise ValueError(
                f"vf-triviaqa-search: dataset='synthetic' is answerable only from its own corpus, got corpus={corpus!r}; "
                "leave corpus unset, or use dataset='jsonl'/'hf' with a corpus file"
            )
        world = FactWorld.generate(seed=world_seed, num_entities=num_entities)
        wanted = None if num_train < 0 else num_train + num_eval
        train_rows, eval_rows = split(synthetic_questions(world, wanted, seed, relations), num_train, num_eval, seed)
        return train_rows, eval_rows, world.documents()
    if corpus in (None, "synthetic"):
        raise ValueError(f"vf-triviaqa-search: dataset={dataset!r} needs corpus=<path to a wiki-18 or KILT JSONL file>")
    if dataset == "jsonl":
        if data_path is None:
            raise ValueError("vf-triviaqa-search: dataset='jsonl' needs data_path=<TriviaQA file>")
        train_rows, eval_rows = split(load_triviaqa_file(data_path), num_train, num_eval, seed)
    else:
        train_rows = split(load_triviaqa_hf("train"), num_train, 0, seed)[0]
        eval_rows = split(load_triviaqa_hf("validation"), num_eval, 0, seed)[0]
    return train_rows, eval_rows, load_corpus(corpus)
