"""GSM8K-style problems as {question, answer, info} rows, from three sources.

synthetic  reasoning-gym's `gsm_symbolic` generators (templated GSM8K problems with fresh numbers), seeded, offline
hf         openai/gsm8k, config "main" (needs network or a warm Hugging Face cache)
jsonl      files in GSM8K's own layout: {question, answer}, where the answer's last line is "#### N"
"""

from __future__ import annotations

import json
from pathlib import Path

from datasets import Dataset

SOURCES = ("synthetic", "hf", "jsonl")
JSONL_FILES = {"train": "train.jsonl", "eval": "test.jsonl"}
HF_SPLITS = {"train": "train", "eval": "test"}


def gsm8k_final_answer(solution: str) -> str:
    """The number after "####" in a GSM8K solution, without thousands separators
    (the format of openai/grade-school-math, whose own answer extraction also drops commas)."""
    if "####" not in solution:
        raise ValueError(f"GSM8K solution has no '#### <answer>' line: {solution[-80:]!r}")
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _rows(records, source: str) -> Dataset:
    return Dataset.from_list(
        [
            {"question": r["question"], "answer": gsm8k_final_answer(r["answer"]), "info": {"source": source}}
            for r in records
        ]
    )


def synthetic(num_train: int, num_eval: int, seed: int) -> tuple[Dataset, Dataset]:
    """One seeded reasoning-gym dataset sliced in two, so train and eval never share an item."""
    import reasoning_gym  # imported here: it takes seconds, and only this source needs it

    items = list(reasoning_gym.create_dataset("gsm_symbolic", seed=seed, size=num_train + num_eval))
    rows = [
        {
            "question": item["question"],
            "answer": str(item["answer"]),
            "info": {
                "source": "reasoning_gym/gsm_symbolic",
                "difficulty": item["metadata"].get("difficulty"),
            },
        }
        for item in items
    ]
    return Dataset.from_list(rows[:num_train]), Dataset.from_list(rows[num_train:])


def from_jsonl(path: str | Path, split: str, limit: int) -> Dataset:
    """`path` is a folder holding train.jsonl and test.jsonl (GSM8K's layout) or a single .jsonl file."""
    path = Path(path)
    file = path / JSONL_FILES[split] if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"GSM8K jsonl not found: {file} (data_path={str(path)!r}); pass a folder with "
            f"{sorted(JSONL_FILES.values())} or a .jsonl file of {{question, answer}} rows"
        )
    records = []
    with file.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if len(records) == limit:
                break
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{file}:{line_no}: not a JSON object ({e})") from None
    return _rows(records, f"jsonl:{file.name}")


def from_hf(split: str, limit: int) -> Dataset:
    from datasets import load_dataset

    data = load_dataset("openai/gsm8k", "main", split=HF_SPLITS[split])
    return _rows(data.select(range(min(limit, len(data)))), "openai/gsm8k")


def load(
    source: str, num_train: int, num_eval: int, seed: int, data_path: str | None
) -> tuple[Dataset, Dataset]:
    """(train, eval) datasets of `source`."""
    if source == "synthetic":
        return synthetic(num_train, num_eval, seed)
    if source == "hf":
        return from_hf("train", num_train), from_hf("eval", num_eval)
    if source == "jsonl":
        if data_path is None:
            raise ValueError(
                "dataset='jsonl' needs data_path=<folder with train.jsonl/test.jsonl or a .jsonl file>"
            )
        return from_jsonl(data_path, "train", num_train), from_jsonl(data_path, "eval", num_eval)
    raise ValueError(f"unknown dataset {source!r}: choose one of {list(SOURCES)}")
