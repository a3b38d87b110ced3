import json
from collections import Counter

import pytest
from vf_musique.env import question_documents, supporting_ids

from rlvr.data.multihop import (
    MultiHopExample,
    MultiHopFormatError,
    convert,
    load_multihop_file,
    synthetic_multihop,
)
from rlvr.retrieval import BM25Retriever, GoldenRetriever
from rlvr.retrieval.bm25 import document_text, tokenize


def _info(ex: MultiHopExample) -> dict:
    return {"id": ex.id, "paragraphs": [{**p, "text": p["text"]} for p in ex.to_dict()["paragraphs"]]}


@pytest.fixture(scope="module")
def samples(shared_data):
    return {
        "musique": load_multihop_file(shared_data / "musique" / "musique_ans_sample100.jsonl"),
        "hotpotqa": load_multihop_file(shared_data / "hotpotqa" / "hotpot_dev_distractor_sample5.jsonl"),
        "2wiki": load_multihop_file(shared_data / "2wikimultihopqa" / "2wiki_dev_sample5.jsonl"),
    }


def test_musique_sample_in_unified_schema(samples, shared_data):
    musique = samples["musique"]
    assert len(musique) == 100 and {e.source for e in musique} == {"musique"}
    assert Counter(e.hops for e in musique) == {2: 68, 3: 27, 4: 5}  # 2hop, 3hop1+3hop2, 4hop1+4hop3
    first = musique[0]
    assert first.id == "2hop__150763_14904" and first.answer == "G. Stanley Hall"
    assert first.aliases == ("Stanley Hall",) and first.supporting_idxs == [6, 10]
    # HippoRAG's JSON-array copy of the same records loads to the same examples.
    assert load_multihop_file(shared_data / "musique" / "hipporag_musique_train_100.json") == musique
    assert MultiHopExample.from_dict(first.to_dict()) == first


def test_hotpot_and_2wiki_in_unified_schema(samples):
    for source, n in (("hotpotqa", 5), ("2wiki", 5)):
        examples = samples[source]
        assert len(examples) == n and {e.source for e in examples} == {source}
        assert all(len(e.paragraphs) == 10 for e in examples)
    assert [e.hops for e in samples["2wiki"]] == [2, 4, 2, 4, 2]  # compositional 2, bridge_comparison 4
    kansas = samples["hotpotqa"][0]
    assert kansas.answer == "Kansas Song" and kansas.hops == 2
    # This dev record's context lacks its "Kansas Song" paragraph: only "University of Kansas" supports.
    assert [kansas.paragraphs[i].title for i in kansas.supporting_idxs] == ["University of Kansas"]
    assert kansas.paragraphs[0].text.startswith("The history of the Kansas City metropolitan area begins")


def test_hugging_face_dict_layout_matches_the_original_list_layout(shared_data):
    record = json.loads((shared_data / "hotpotqa" / "hotpot_dev_distractor_sample5.jsonl").open().readline())
    hf = {
        **record,
        "id": record["_id"],
        "context": {
            "title": [t for t, _ in record["context"]],
            "sentences": [s for _, s in record["context"]],
        },
        "supporting_facts": {
            "title": [t for t, _ in record["supporting_facts"]],
            "sent_id": [i for _, i in record["supporting_facts"]],
        },
    }
    assert convert(hf, "hotpotqa") == convert(record)


def test_bad_records_say_where_and_what(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "a"}\n')
    with pytest.raises(
        MultiHopFormatError, match=r"bad\.jsonl:1: unsupported multi-hop record .*'answer', 'question'"
    ):
        load_multihop_file(path)
    path.write_text('{"id": "x", "question": "q", "paragraphs": [], "question_decomposition": []}\n')
    with pytest.raises(
        MultiHopFormatError, match=r"bad\.jsonl:1: MuSiQue record is missing fields \['answer'\]"
    ):
        load_multihop_file(path)


@pytest.mark.parametrize("source", ["musique", "hotpotqa", "2wiki"])
def test_golden_retriever_returns_exactly_the_supporting_set(samples, source):
    for ex in samples[source]:
        info = _info(ex)
        docs = question_documents(info)
        hits = GoldenRetriever(docs, supporting_ids(info)).search("any query", k=len(docs))
        assert {h.doc.id for h in hits} == {str(i) for i in ex.supporting_idxs}


@pytest.mark.parametrize("backend", ["bm25s", "rank_bm25"])
def test_bm25_ranks_first_the_paragraph_with_the_query_rare_terms(samples, backend):
    for ex in samples["musique"][:30] + samples["hotpotqa"] + samples["2wiki"]:
        docs = question_documents(_info(ex))
        retriever = BM25Retriever(docs, backend=backend, cache=False)
        df = Counter(t for d in docs for t in set(tokenize(document_text(d))))
        for target in (docs[0], docs[-1]):
            rare = sorted(t for t in set(tokenize(target.text)) if df[t] == 1)
            if len(rare) < 2:
                continue
            assert retriever.search(" ".join(rare[:3]), k=3)[0].doc == target, (ex.id, target.id, rare[:3])


def test_synthetic_questions_have_2_to_4_hops_and_supporting_paragraphs():
    examples = synthetic_multihop(9, hops=(2, 3, 4), seed=1, num_entities=150)
    assert Counter(e.hops for e in examples) == {2: 3, 3: 3, 4: 3}
    for e in examples:
        assert len(e.supporting_idxs) == e.hops and len(e.paragraphs) == 20 and e.source == "synthetic"
        # The answer is stated in the last hop's supporting paragraph.
        assert any(e.answer in e.paragraphs[i].text for i in e.supporting_idxs)
