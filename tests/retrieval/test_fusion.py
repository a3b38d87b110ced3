import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlvr.retrieval import (
    Document,
    Hit,
    HybridRetriever,
    min_max_normalize,
    reciprocal_rank_fusion,
    weighted_score_fusion,
)


def test_rrf_by_hand():
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "b"]], k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 62)  # 0.032258
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)  # 0.032266: two good ranks beat one first place
    assert sorted(fused, key=fused.get, reverse=True) == ["c", "b", "a"]


def test_weighted_fusion_by_hand():
    sparse = {"a": 10.0, "b": 5.0, "c": 0.0}  # normalised: a=1, b=0.5, c=0
    dense = {"b": 0.9, "c": 0.5}  # normalised: b=1, c=0; a missing counts 0
    fused = weighted_score_fusion([sparse, dense], [0.5, 0.5])
    assert fused == pytest.approx({"a": 0.5, "b": 0.75, "c": 0.0})
    assert min_max_normalize({"x": 3.0, "y": 3.0}) == {"x": 1.0, "y": 1.0}
    with pytest.raises(ValueError, match="2 score lists but 1 weights"):
        weighted_score_fusion([sparse, dense], [1.0])


rankings = st.lists(st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=8), min_size=1, max_size=4)


@given(rankings, st.randoms())
def test_rrf_ignores_the_order_of_rankings(lists, rnd):
    shuffled = list(lists)
    rnd.shuffle(shuffled)
    assert reciprocal_rank_fusion(shuffled) == pytest.approx(reciprocal_rank_fusion(lists))


@given(rankings)
def test_rrf_first_everywhere_wins_and_extra_lists_never_lower_a_score(lists):
    fused = reciprocal_rank_fusion(lists)
    heads = {r[0] for r in lists if r}
    if len(heads) == 1 and all(lists):
        assert max(fused, key=fused.get) in heads
    more = reciprocal_rank_fusion([*lists, ["a", "b"]])
    assert all(more[d] >= s for d, s in fused.items())


@given(st.dictionaries(st.text(max_size=3), st.floats(-1e6, 1e6), min_size=1))
def test_min_max_maps_into_unit_interval_and_keeps_order(scores):
    norm = min_max_normalize(scores)
    assert all(0.0 <= v <= 1.0 for v in norm.values())
    assert max(norm.values()) == 1.0
    for x in scores:
        for y in scores:
            if scores[x] < scores[y]:
                assert norm[x] <= norm[y]


class Fixed:
    """A stand-in retriever with a fixed ranking, to test fusion in isolation from BM25 and embeddings."""

    def __init__(self, scored: list[tuple[str, float]]):
        self.scored = scored

    def search(self, query, k):
        return [Hit(Document(d, d, d), s, r) for r, (d, s) in enumerate(self.scored[:k], start=1)]


def test_hybrid_rrf_and_weighted_orders():
    sparse = Fixed([("a", 10.0), ("b", 5.0), ("c", 0.0)])
    dense = Fixed([("c", 0.9), ("b", 0.5)])
    rrf = HybridRetriever(sparse, dense, fusion="rrf").search("q", 3)
    assert [h.doc.id for h in rrf] == ["c", "b", "a"]
    assert [h.rank for h in rrf] == [1, 2, 3]
    assert rrf[0].score == pytest.approx(1 / 63 + 1 / 61)
    dense3 = Fixed([("c", 0.9), ("b", 0.5), ("a", 0.1)])  # normalised: c=1, b=0.5, a=0
    dense_only = HybridRetriever(sparse, dense3, fusion="weighted", dense_weight=1.0).search("q", 3)
    assert [h.doc.id for h in dense_only] == ["c", "b", "a"]
    sparse_only = HybridRetriever(sparse, dense3, fusion="weighted", dense_weight=0.0).search("q", 3)
    assert [h.doc.id for h in sparse_only] == ["a", "b", "c"]
    # sparse a=1, b=0.5, c=0; dense c=1, b=0.5, a=0: with weights 0.3 / 0.7, c=0.7 > b=0.5 > a=0.3.
    mixed = HybridRetriever(sparse, dense3, fusion="weighted", dense_weight=0.7).search("q", 3)
    assert [(h.doc.id, round(h.score, 6)) for h in mixed] == [("c", 0.7), ("b", 0.5), ("a", 0.3)]
    with pytest.raises(ValueError, match="unknown fusion 'max'"):
        HybridRetriever(sparse, dense, fusion="max")
    with pytest.raises(ValueError, match="dense_weight must be in"):
        HybridRetriever(sparse, dense, fusion="weighted", dense_weight=1.5)

