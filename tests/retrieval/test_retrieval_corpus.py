import json

import pytest

from rlvr.retrieval import CorpusFormatError, Document, corpus_hash, load_corpus


def test_wiki18_layout_splits_quoted_title_from_passage(shared_data):
    docs = load_corpus(shared_data / "wiki_corpus" / "flashrag_wiki18_dpr_sample1000.jsonl")
    assert len(docs) == 1000
    assert docs[0].id == "0"
    assert docs[0].title == "Evan Morris"
    assert docs[0].text.startswith("Evan Morris Evan L. Morris (January 26, 1977")
    assert len({d.id for d in docs}) == 1000


def test_kilt_layout_one_document_per_paragraph_without_title_or_section_markers(shared_data):
    path = shared_data / "wiki_corpus" / "r1searcher_filtered_kilt_sample_100.jsonl"
    docs = load_corpus(path)
    first = json.loads(path.open().readline())
    expected = [p.strip() for p in first["text"][1:] if p.strip() and not p.startswith("Section::::")]
    article = [d for d in docs if d.title == first["wikipedia_title"]]
    assert [d.text for d in article] == expected
    assert article[0].id == f"{first['wikipedia_title']}_1"
    assert not any(d.text.startswith("Section::::") for d in docs)


def test_title_text_json_array_uses_positions_as_ids(shared_data):
    docs = load_corpus(shared_data / "wiki_corpus" / "hipporag_2wikimultihopqa_corpus.json")
    assert len(docs) == 6119
    assert docs[0] == Document(id="0", title="Teutberga", text=docs[0].text)
    assert docs[0].text.startswith("Teutberga( died 11 November 875)")
    assert docs[-1].id == "6118"


def test_title_text_jsonl_keeps_given_ids(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        '{"id": "p1", "title": "A", "text": "alpha"}\n\n{"id": "p2", "title": "B", "text": "beta"}\n'
    )
    assert load_corpus(path) == [Document("p1", "A", "alpha"), Document("p2", "B", "beta")]


def test_unknown_layout_names_file_line_keys_and_supported_layouts(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "1", "contents": "\\"T\\"\\nx"}\n{"question": "q", "answer": "a"}\n')
    with pytest.raises(CorpusFormatError, match=r"bad\.jsonl:2: .*\['answer', 'question'\].*wiki-18"):
        load_corpus(path)


def test_invalid_json_and_duplicate_ids_and_missing_file(tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "1", "contents": "x"}\n{oops\n')
    with pytest.raises(CorpusFormatError, match=r"broken\.jsonl:2: not valid JSON"):
        load_corpus(broken)
    dup = tmp_path / "dup.json"
    dup.write_text(
        json.dumps([{"id": "x", "title": "A", "text": "a"}, {"id": "x", "title": "B", "text": "b"}])
    )
    with pytest.raises(ValueError, match="duplicate document id 'x'"):
        load_corpus(dup)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        load_corpus(tmp_path / "nope.jsonl")


def test_corpus_hash_depends_on_every_field_and_on_field_boundaries():
    base = [Document("1", "ab", "c")]
    assert corpus_hash(base) == corpus_hash([Document("1", "ab", "c")])
    assert corpus_hash(base) != corpus_hash([Document("1", "a", "bc")])
    assert corpus_hash(base) != corpus_hash([Document("2", "ab", "c")])
    assert corpus_hash(base) != corpus_hash(base + base)
