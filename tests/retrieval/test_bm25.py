import math
from collections import Counter

import pytest

from rlvr.retrieval import BM25Retriever, Document, build_retriever, load_corpus
from rlvr.retrieval.bm25 import document_text, tokenize

BACKENDS = ["bm25s", "rank_bm25"]
TOY = [Document("a", "", "apple banana"), Document("b", "", "apple cherry"), Document("c", "", "durian")]


@pytest.mark.parametrize("cache", [True, False])
def test_bm25s_lucene_score_by_hand(cache):
    # N=3, df(banana)=1, |d_a|=2, avgdl=5/3, tf=1, k1=1.5, b=0.75.
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 1 / (1 + 1.5 * (1 - 0.75 + 0.75 * 2 / (5 / 3)))  # = 0.359937...
    hits = BM25Retriever(TOY, backend="bm25s", cache=cache).search("banana", k=3)
    assert [h.doc.id for h in hits] == ["a"]  # b and c share no term with the query
    assert hits[0].score == pytest.approx(expected, rel=1e-5)
    assert hits[0].rank == 1


def test_rank_bm25_okapi_score_by_hand():
    idf = math.log((3 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 1 * (1.5 + 1) / (1 + 1.5 * (1 - 0.75 + 0.75 * 2 / (5 / 3)))  # = 0.468648...
    hits = BM25Retriever(TOY, backend="rank_bm25").search("Banana!", k=3)
    assert [h.doc.id for h in hits] == ["a"]
    assert hits[0].score == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_rare_terms_rank_their_paragraph_first_on_real_corpus(shared_data, backend):
    docs = load_corpus(shared_data / "wiki_corpus" / "flashrag_wiki18_dpr_sample1000.jsonl")
    retriever = BM25Retriever(docs, backend=backend)
    df = Counter(t for d in docs for t in set(tokenize(document_text(d))))
    for target in (docs[0], docs[123], docs[777]):
        # The query is the target's three rarest words in the corpus (document frequency 1 where possible).
        words = sorted(set(tokenize(target.text)), key=lambda t: (df[t], t))
        hits = retriever.search(" ".join(words[:3]), k=5)
        assert hits[0].doc == target
        assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
        assert all(a.score >= b.score for a, b in zip(hits, hits[1:], strict=False))


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_is_cached_on_disk_and_reused(backend, monkeypatch, tmp_path):
    first = BM25Retriever(TOY, backend=backend)
    assert first.index_dir is not None and first.index_dir.parent == tmp_path / "rlvr_home" / "index"
    assert not [p for p in first.index_dir.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left

    def fail(*args, **kwargs):
        raise AssertionError("index rebuilt although it is cached")

    monkeypatch.setattr(BM25Retriever, "_fit", fail)
    second = BM25Retriever(TOY, backend=backend)
    assert second.index_dir == first.index_dir
    assert second.search("apple", 3) == first.search("apple", 3)


def test_cache_key_changes_with_corpus_and_params(tmp_path):
    base = BM25Retriever(TOY, cache_dir=tmp_path)
    assert BM25Retriever(TOY, cache_dir=tmp_path, k1=1.2).index_dir != base.index_dir
    assert BM25Retriever(TOY, cache_dir=tmp_path, backend="rank_bm25").index_dir != base.index_dir
    changed = [*TOY[:2], Document("c", "", "durian fruit")]
    assert BM25Retriever(changed, cache_dir=tmp_path).index_dir != base.index_dir


def test_failed_build_publishes_nothing(monkeypatch, tmp_path):
    def boom(self, k1, b):
        raise RuntimeError("disk full")

    monkeypatch.setattr(BM25Retriever, "_fit", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        BM25Retriever(TOY, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_no_match_and_stopword_queries_return_nothing():
    retriever = BM25Retriever(TOY, cache=False)
    assert retriever.search("zebra", 3) == []
    assert retriever.search("the of and", 3) == []


def test_bad_arguments_explain_themselves():
    with pytest.raises(ValueError, match="unknown backend 'lucene'.*bm25s"):
        BM25Retriever(TOY, backend="lucene")
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever([])
    with pytest.raises(ValueError, match="duplicate document id 'a'"):
        BM25Retriever([TOY[0], TOY[0]])
    with pytest.raises(ValueError, match="k must be a positive integer, got 0"):
        BM25Retriever(TOY, cache=False).search("apple", 0)
    with pytest.raises(ValueError, match="unknown retriever kind 'sparse'.*'bm25', 'semantic'"):
        build_retriever("sparse", TOY)
