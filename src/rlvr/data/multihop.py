"""MuSiQue, HotpotQA and 2WikiMultihopQA in one schema, plus the synthetic default over the fact world.

Every record becomes a `MultiHopExample`: question, answer, aliases, the question's own paragraphs (with
`is_supporting`) and a hop count. The original layouts are read as published:

- MuSiQue (StonyBrookNLP/musique, musique_ans_v1.0_*.jsonl / musique_full_v1.0_*.jsonl): `paragraphs[{idx, title,
  paragraph_text, is_supporting}]`, `question_decomposition` (one entry per hop), `answer`, `answer_aliases`,
  `answerable`. hops = len(question_decomposition).
- HotpotQA (hotpot_*_v1.json) and 2WikiMultihopQA (dev.json...): `context [[title, [sentences]]]`,
  `supporting_facts [[title, sentence id]]`, `_id`; the Hugging Face copies store both as dicts of lists
  (`context {title: [...], sentences: [[...]]}`, `supporting_facts {title: [...], sent_id: [...]}`), read too.
  A paragraph is supporting when its title has a supporting fact; hops = the number of supporting titles
  (2 for HotpotQA; 2 or 4 for 2Wiki, whose bridge-comparison questions join four paragraphs).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SOURCES = ("musique", "hotpotqa", "2wiki", "synthetic")


class MultiHopFormatError(ValueError):
    """A record that is not in any supported multi-hop layout (the message says where and why)."""


@dataclass(frozen=True)
class Paragraph:
    idx: int  # position in the question's paragraph list: MuSiQue's `idx`, the id that citations use
    title: str
    text: str
    is_supporting: bool


@dataclass(frozen=True)
class MultiHopExample:
    id: str
    question: str
    answer: str
    aliases: tuple[
        str, ...
    ]  # other accepted answers; MuSiQue's official metric scores max over answer + aliases
    paragraphs: tuple[Paragraph, ...]
    hops: int
    source: str
    answerable: bool = True

    @property
    def supporting_idxs(self) -> list[int]:
        return [p.idx for p in self.paragraphs if p.is_supporting]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> MultiHopExample:
        return cls(
            **{
                **row,
                "aliases": tuple(row["aliases"]),
                "paragraphs": tuple(Paragraph(**p) for p in row["paragraphs"]),
            }
        )


def from_musique(record: dict[str, Any], source: str = "musique") -> MultiHopExample:
    _require(record, ("id", "question", "answer", "paragraphs", "question_decomposition"), "MuSiQue")
    return MultiHopExample(
        id=str(record["id"]),
        question=record["question"],
        answer=record["answer"],
        aliases=tuple(record.get("answer_aliases") or ()),
        paragraphs=tuple(
            Paragraph(int(p["idx"]), p["title"], p["paragraph_text"], bool(p["is_supporting"]))
            for p in record["paragraphs"]
        ),
        hops=len(record["question_decomposition"]),
        source=source,
        answerable=bool(record.get("answerable", True)),
    )


def from_hotpot_layout(record: dict[str, Any], source: str) -> MultiHopExample:
    """HotpotQA and 2WikiMultihopQA share the context / supporting_facts layout."""
    _require(record, ("question", "answer", "context", "supporting_facts"), source)
    context = record["context"]
    if isinstance(context, dict):  # Hugging Face datasets layout
        context = list(zip(context["title"], context["sentences"], strict=True))
    facts = record["supporting_facts"]
    supporting_titles = set(facts["title"] if isinstance(facts, dict) else [title for title, _ in facts])
    paragraphs = tuple(
        # HotpotQA sentences keep their leading spaces, so joining with "" restores the paragraph (2Wiki's too).
        Paragraph(i, title, "".join(sentences).strip(), title in supporting_titles)
        for i, (title, sentences) in enumerate(context)
    )
    return MultiHopExample(
        id=str(record.get("_id", record.get("id"))),
        question=record["question"],
        answer=record["answer"],
        aliases=tuple(record.get("answer_aliases") or ()),
        paragraphs=paragraphs,
        # Counted from the facts, not the paragraphs: a few original records lack a supporting paragraph in their
        # context (e.g. HotpotQA dev 5a7166395542994082a3e814); the question still has that many hops.
        hops=len(supporting_titles),
        source=source,
    )


def detect_source(record: dict[str, Any]) -> str:
    if "paragraphs" in record and "question_decomposition" in record:
        return "musique"
    if "context" in record and "supporting_facts" in record:
        # 2Wiki records carry knowledge-base evidence triples; HotpotQA records do not.
        return "2wiki" if "evidences" in record else "hotpotqa"
    raise MultiHopFormatError(
        f"unsupported multi-hop record (keys: {sorted(record)}); expected MuSiQue (paragraphs, "
        "question_decomposition) or HotpotQA / 2WikiMultihopQA (context, supporting_facts)"
    )


def convert(record: dict[str, Any], source: str | None = None) -> MultiHopExample:
    """One original record in the unified schema; `source` is detected from the fields when not given."""
    source = source or detect_source(record)
    if source not in SOURCES:
        raise ValueError(f"unknown multi-hop source {source!r}; choose one of {SOURCES}")
    return (
        from_musique(record, source)
        if source in ("musique", "synthetic")
        else from_hotpot_layout(record, source)
    )


def load_multihop_file(path: str | Path, source: str | None = None) -> list[MultiHopExample]:
    """A local file in an original layout: JSON Lines (MuSiQue) or a JSON array (HotpotQA, 2Wiki, HippoRAG's copies)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"multi-hop data file not found: {path}")
    examples = []
    for where, record in _records(path):
        try:
            examples.append(convert(record, source))
        except (KeyError, TypeError, ValueError) as e:
            raise MultiHopFormatError(f"{where}: {e}") from e
    return examples


def load_multihop_hf(dataset_id: str, split: str, source: str | None = None, name: str | None = None):
    """A Hugging Face dataset with the original fields (e.g. "hotpotqa/hotpot_qa" name="distractor",
    or a MuSiQue copy with the official fields); needs the network or a warm datasets cache."""
    from datasets import load_dataset

    return [convert(dict(r), source) for r in load_dataset(dataset_id, name, split=split)]


def synthetic_multihop(
    n: int, hops: Iterable[int] = (2, 3, 4), seed: int = 0, world_seed: int = 0, num_entities: int = 300
) -> list[MultiHopExample]:
    """n questions over the project's fact world (rlvr.data.factworld), split as evenly as possible across `hops`,
    each with its supporting paragraphs and distractors in MuSiQue's record layout."""
    from rlvr.data.factworld import FactWorld

    world = FactWorld.generate(seed=world_seed, num_entities=num_entities)
    hops = list(hops)
    counts = [n // len(hops) + (i < n % len(hops)) for i in range(len(hops))]
    return [
        from_musique(record, source="synthetic")
        for h, count in zip(hops, counts, strict=True)
        if count
        for record in world.multi_hop_questions(count, hops=h, seed=seed)
    ]


def _require(record: dict[str, Any], keys: tuple[str, ...], layout: str) -> None:
    if missing := [k for k in keys if k not in record]:
        raise MultiHopFormatError(f"{layout} record is missing fields {missing} (has {sorted(record)})")


def _records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        for i, record in enumerate(json.loads(text)):
            yield f"{path}[{i}]", record
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield f"{path}:{lineno}", json.loads(line)
            except json.JSONDecodeError as e:
                raise MultiHopFormatError(f"{path}:{lineno}: not valid JSON ({e})") from e
