"""The golden (oracle) retriever: every supporting paragraph of a question, whatever the query and k."""

import pytest

from rlvr.data.multihop import load_multihop_file
from rlvr.retrieval import Document, GoldenRetriever


def test_golden_returns_every_supporting_document_in_corpus_order():
    docs = [Document(str(i), f"T{i}", f"text {i}") for i in range(5)]
    golden = GoldenRetriever(docs, supporting_ids=["3", "1"])
    assert [h.doc.id for h in golden.search("anything", 10)] == ["1", "3"]
    # k does not cut the oracle's answer: with k=1 both supporting documents still come back
    assert [(h.doc.id, h.rank, h.score) for h in golden.search("anything", 1)] == [("1", 1, 1.0), ("3", 2, 1.0)]
    with pytest.raises(ValueError, match="k must be a positive integer"):
        golden.search("anything", 0)
    with pytest.raises(ValueError, match=r"supporting ids \['9'\] are not among the 5 documents"):
        GoldenRetriever(docs, supporting_ids=["9"])


@pytest.mark.parametrize("sample", ["2wikimultihopqa/2wiki_dev_sample5.jsonl", "musique/musique_ans_sample100.jsonl"])
def test_four_hop_questions_get_all_four_paragraphs_under_top_3(shared_data, sample):
    four_hop = [ex for ex in load_multihop_file(shared_data / sample) if ex.hops == 4]
    assert four_hop, f"{sample} has no 4-hop question"
    for ex in four_hop:
        docs = [Document(str(p.idx), p.title, p.text) for p in ex.paragraphs]
        hits = GoldenRetriever(docs, [str(i) for i in ex.supporting_idxs]).search(ex.question, 3)
        assert sorted(int(h.doc.id) for h in hits) == sorted(ex.supporting_idxs) and len(hits) == 4
