import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_musique.metrics import answer_em, answer_f1, f1, hop_weight, parse_citations, precision, recall


def test_answer_metrics_by_hand():
    golds = ["G. Stanley Hall", "Stanley Hall"]
    assert answer_em("the Stanley Hall.", golds) == 1.0  # articles and punctuation dropped; alias matches
    assert answer_em("Hall", golds) == 0.0
    # "hall" vs "stanley hall": P=1, R=1/2 -> 2/3; vs "g stanley hall": R=1/3 -> 1/2. Max over golds = 2/3.
    assert answer_f1("Hall", golds) == pytest.approx(2 / 3)
    # "stanley hall was president": P=2/4, R=2/2 -> F1 = 2/3 against the alias.
    assert answer_f1("Stanley Hall was president", golds) == pytest.approx(2 / 3)
    assert answer_f1("Wundt", golds) == 0.0
    assert answer_em(None, golds) == 0.0 and answer_f1(None, golds) == 0.0


def test_empty_answers_follow_musique_compute_f1():
    # musique metrics/answer.py: if either side has no tokens, F1 = int(both empty).
    assert answer_f1("The", ["a"]) == 1.0  # both normalise to ""
    assert answer_f1("", ["Paris"]) == 0.0
    assert answer_em("", ["the"]) == 1.0


def test_set_metrics_and_citations_by_hand():
    assert precision(["3", "7", "9"], ["3", "9", "12", "14"]) == pytest.approx(2 / 3)
    assert recall(["3", "7", "9"], ["3", "9", "12", "14"]) == pytest.approx(1 / 2)
    assert f1(2 / 3, 1 / 2) == pytest.approx(4 / 7)
    assert precision([], ["1"]) == 0.0 and recall(["1"], []) == 0.0 and f1(0.0, 0.0) == 0.0
    assert parse_citations("[3], 12 and 3") == ["3", "12"]
    assert parse_citations(None) == []
    assert [hop_weight(h) for h in (2, 3, 4)] == [1.0, 1.5, 2.0]


words = st.lists(st.sampled_from(["paris", "the", "city", "of", "light", "France", "a"]), max_size=5).map(
    " ".join
)


@given(words, st.lists(words, min_size=1, max_size=3))
def test_em_implies_full_f1_and_scores_are_max_over_golds(prediction, golds):
    em, score = answer_em(prediction, golds), answer_f1(prediction, golds)
    assert 0.0 <= score <= 1.0 and em in (0.0, 1.0)
    if em:
        assert score == 1.0
    assert score == max(answer_f1(prediction, [g]) for g in golds)
    assert em == max(answer_em(prediction, [g]) for g in golds)


@given(st.sets(st.integers(0, 20)), st.sets(st.integers(0, 20)))
def test_precision_recall_swap_roles(predicted, gold):
    assert precision(predicted, gold) == recall(gold, predicted)
    assert 0.0 <= f1(precision(predicted, gold), recall(predicted, gold)) <= 1.0
