"""Documents, hits, and corpus loading for the three public passage layouts the project reads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float
    rank: int  # 1-based, as in TREC runs and in the RRF formula


class Retriever(Protocol):
    def search(self, query: str, k: int) -> list[Hit]: ...


class CorpusFormatError(ValueError):
    """A corpus file whose layout is not one of the supported ones (the message says where and what)."""


_LAYOUTS = (
    'wiki-18 / Pyserini {"id", "contents": "\\"Title\\"\\ntext"}; '
    'KILT {"wikipedia_title", "text": [paragraphs]}; '
    '{"title", "text"} (optional "id")'
)


def check_unique_ids(docs: Sequence[Document], where: str = "documents") -> None:
    seen: set[str] = set()
    for doc in docs:
        if doc.id in seen:
            raise ValueError(
                f"{where}: duplicate document id {doc.id!r}; every Document needs a unique id "
                "(retrievers and citation metrics identify paragraphs by id)"
            )
        seen.add(doc.id)


def check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"search(query, k): k must be a positive integer, got {k!r}")


def top_k(docs: Sequence[Document], scores: np.ndarray, k: int) -> list[Hit]:
    """The k best-scoring documents, best first; ties keep corpus order; non-finite scores (= no match) are dropped."""
    check_k(k)
    order = np.argsort(-scores, kind="stable")
    kept = [int(i) for i in order if np.isfinite(scores[i])][:k]
    return [Hit(doc=docs[i], score=float(scores[i]), rank=r) for r, i in enumerate(kept, start=1)]


def corpus_hash(docs: Iterable[Document]) -> str:
    """sha256 over ids, titles and texts in order: the key of every on-disk index built from a corpus."""
    h = hashlib.sha256()
    for doc in docs:
        for field in (doc.id, doc.title, doc.text):
            data = field.encode("utf-8")
            # Length-prefix each field so that ("ab", "c") and ("a", "bc") hash differently.
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    return h.hexdigest()


def load_corpus(path: str | Path) -> list[Document]:
    """Load passages from a .jsonl or .json (array) file in one of the supported layouts (detected per record).

    - wiki-18 (DPR 100-word passages as Pyserini/FlashRAG/Search-R1 ship them): ``contents`` is the quoted
      title, a newline, then the passage.
    - KILT knowledge source: one article per record; each paragraph becomes a Document with id
      ``"{wikipedia_id or title}_{paragraph index}"``. The first paragraph (the title itself) and the
      ``Section::::`` headings are not passages and are skipped.
    - ``{"title", "text"}`` lists (HippoRAG corpora): id = the record's ``id`` if present, else its 0-based position in the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    docs = [
        doc for i, (where, record) in enumerate(_records(path)) for doc in _parse_record(record, i, where)
    ]
    check_unique_ids(docs, where=str(path))
    return docs


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """Yield (location for error messages, record), from JSON Lines or from a JSON array."""
    with path.open(encoding="utf-8") as f:
        head = f.read(1)
        while head.isspace():
            head = f.read(1)
        f.seek(0)
        if head == "[":
            for i, record in enumerate(json.load(f)):
                yield f"{path}[{i}]", record
            return
        for lineno, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield f"{path}:{lineno}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise CorpusFormatError(f"{path}:{lineno}: not valid JSON ({e})") from e


def _parse_record(record: Any, position: int, where: str) -> list[Document]:
    if isinstance(record, dict) and "contents" in record and "id" in record:
        title, _, text = str(record["contents"]).partition("\n")
        return [Document(id=str(record["id"]), title=title.strip().strip('"'), text=text.strip())]
    if isinstance(record, dict) and "wikipedia_title" in record and isinstance(record.get("text"), list):
        title = str(record["wikipedia_title"])
        stem = str(record.get("wikipedia_id", title))
        return [
            Document(id=f"{stem}_{i}", title=title, text=paragraph.strip())
            for i, paragraph in enumerate(record["text"])
            if i > 0 and paragraph.strip() and not paragraph.startswith("Section::::")
        ]
    if isinstance(record, dict) and "title" in record and isinstance(record.get("text"), str):
        doc_id = str(record.get("id", position))
        return [Document(id=doc_id, title=str(record["title"]), text=record["text"].strip())]
    keys = sorted(record) if isinstance(record, dict) else type(record).__name__
    raise CorpusFormatError(
        f"{where}: unsupported passage record (keys: {keys}); supported layouts: {_LAYOUTS}"
    )
