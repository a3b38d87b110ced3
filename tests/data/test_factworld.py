"""FactWorld: reproducible, self-consistent, answerable only from its own corpus, MuSiQue-shaped multi-hop."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlvr.data.factworld import RELATIONS, FactWorld
from rlvr.retrieval import BM25Retriever, load_corpus


@pytest.fixture(scope="module")
def world() -> FactWorld:
    return FactWorld.generate(seed=0, num_entities=120)


def test_same_seed_same_world_other_seed_other_world():
    a, b = FactWorld.generate(seed=3, num_entities=40), FactWorld.generate(seed=3, num_entities=40)
    assert a.documents() == b.documents()
    assert a.single_hop_questions(10, seed=1) == b.single_hop_questions(10, seed=1)
    assert a.multi_hop_questions(5, hops=3, seed=1) == b.multi_hop_questions(5, hops=3, seed=1)
    other = FactWorld.generate(seed=4, num_entities=40)
    assert {d.title for d in other.documents()} != {d.title for d in a.documents()}


def test_document_states_facts_hand_checked():
    """One entity checked by hand against the templates: the paragraph names it and states each fact."""
    world = FactWorld.generate(seed=0, num_entities=10)
    country = next(e for e in world.entities if e.kind == "country")
    capital = world.entity(country.facts["capital"])
    leader = world.entity(country.facts["leader"])
    doc = next(d for d in world.documents() if d.title == country.name)
    assert doc.text == (
        f"{country.name} is a country. The capital of {country.name} is {capital.name}. "
        f"{country.name} is led by {leader.name}. The people of {country.name} speak {country.facts['language']}."
    )
    # The capital is one of the country's own cities.
    assert capital.facts["country"] == country.id


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), num_entities=st.integers(10, 150))
def test_world_invariants(seed, num_entities):
    world = FactWorld.generate(seed=seed, num_entities=num_entities)
    assert len(world.entities) == num_entities
    assert {e.kind for e in world.entities} == {"country", "city", "person", "organization"}
    docs = world.documents()
    assert len({d.id for d in docs}) == len(docs) == num_entities
    # Names never share a word: a search for one entity's name cannot match another entity's name.
    words = [w for e in world.entities for w in e.name.split() if w[0].isupper() and w not in _SUFFIX_WORDS]
    assert len(words) == len(set(words))
    for e in world.entities:
        assert set(e.facts) == {r.name for r in RELATIONS.values() if r.subject == e.kind}
        for rel_name, value in e.facts.items():
            target_kind = RELATIONS[rel_name].target
            if target_kind is not None:
                assert world.entity(value).kind == target_kind
        if e.kind == "country":
            assert world.entity(e.facts["capital"]).facts["country"] == e.id


_SUFFIX_WORDS = {"Institute", "Company", "Guild", "Foundation", "Works", "Society"}


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), qseed=st.integers(0, 10_000))
def test_single_hop_answer_is_in_its_document(seed, qseed):
    world = FactWorld.generate(seed=seed, num_entities=30)
    docs = {d.id: d for d in world.documents()}
    questions = world.single_hop_questions(20, seed=qseed)
    assert len({q["question"] for q in questions}) == 20
    for q in questions:
        doc = docs[q["doc_id"]]
        assert q["entity"] == doc.title and q["entity"] in q["question"]
        assert q["answer"] == q["aliases"][0]
        assert all(alias in doc.text for alias in q["aliases"])


def test_search_for_the_entity_name_finds_the_answer(world, tmp_path):
    """The easy setting of the demo: one BM25 search with the entity's name returns the answer paragraph first."""
    retriever = BM25Retriever(world.documents(), cache_dir=tmp_path)
    questions = world.single_hop_questions(200, seed=0)
    for q in questions:
        top = retriever.search(q["entity"], k=1)[0].doc
        assert top.id == q["doc_id"], q
        assert q["answer"] in top.text


def test_fictional_names_are_absent_from_real_wikipedia(world, shared_data):
    """The facts cannot come from memory: no entity name occurs in the real Wikipedia passages sample."""
    corpus = load_corpus(shared_data / "wiki_corpus" / "flashrag_wiki18_dpr_sample1000.jsonl")
    wiki_words = {w.lower() for d in corpus for w in re.findall(r"\w+", f"{d.title} {d.text}")}
    names = {w.lower() for e in world.entities for w in e.name.split() if w not in _SUFFIX_WORDS}
    assert names and not names & wiki_words


@pytest.mark.parametrize("hops", [2, 3, 4])
def test_multi_hop_record_matches_musique_layout_and_chains(world, shared_data, hops):
    real = json.loads((shared_data / "musique" / "musique_ans_sample100.jsonl").read_text().splitlines()[0])
    records = world.multi_hop_questions(10, hops=hops, seed=2)
    assert len({r["question"] for r in records}) == 10
    for rec in records:
        assert set(rec) == set(real)
        assert set(rec["paragraphs"][0]) == set(real["paragraphs"][0])
        assert set(rec["question_decomposition"][0]) == set(real["question_decomposition"][0])
        paragraphs = rec["paragraphs"]
        assert [p["idx"] for p in paragraphs] == list(range(20))
        assert len({p["title"] for p in paragraphs}) == 20
        steps = rec["question_decomposition"]
        assert len(steps) == hops == sum(p["is_supporting"] for p in paragraphs)
        assert {s["paragraph_support_idx"] for s in steps} == {p["idx"] for p in paragraphs if p["is_supporting"]}
        for k, step in enumerate(steps):
            support = paragraphs[step["paragraph_support_idx"]]
            assert step["answer"] in support["paragraph_text"]
            if k > 0:
                # Hop k is about the previous hop's answer, which MuSiQue writes as "#k".
                assert f"#{k}" in step["question"]
                assert support["title"] == steps[k - 1]["answer"]
        assert rec["answer"] == steps[-1]["answer"]
        assert rec["answer"] not in rec["answer_aliases"]
        # The composed question names only the first entity, never an intermediate answer.
        assert paragraphs[steps[0]["paragraph_support_idx"]]["title"] in rec["question"]
        assert not any(s["answer"] in rec["question"] for s in steps)


def test_relations_filter_restricts_questions(world):
    questions = world.single_hop_questions(10, seed=0, relations=["capital"])
    assert {q["relation"] for q in questions} == {"capital"}
    assert all(q["question"].startswith("What is the capital of ") for q in questions)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda w: w.single_hop_questions(10_000), "only"),
        (lambda w: w.single_hop_questions(0), "n must be >= 1"),
        (lambda w: w.single_hop_questions(5, relations=["height"]), "unknown FactWorld relations ['height']"),
        (lambda w: w.multi_hop_questions(5, hops=5), "2 to 4 hops"),
        (lambda w: w.multi_hop_questions(5, hops=3, num_paragraphs=2), "num_paragraphs >= hops"),
    ],
)
def test_bad_requests_say_what_to_change(world, call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call(world)


def test_too_small_world_is_refused():
    with pytest.raises(ValueError, match="num_entities >= 10"):
        FactWorld.generate(num_entities=5)
