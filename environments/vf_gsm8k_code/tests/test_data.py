"""The three data sources: synthetic (seeded), jsonl (the public GSM8K sample), and their errors."""

from __future__ import annotations

import json

import pytest
from vf_gsm8k_code import data


def test_gsm8k_final_answer():
    assert data.gsm8k_final_answer("6 * 2 = <<6*2=12>>12\n#### 1,212") == "1212"
    with pytest.raises(ValueError, match="no '#### <answer>' line"):
        data.gsm8k_final_answer("the answer is 12")


def test_synthetic_is_seeded_and_train_eval_are_disjoint():
    train, eval_ = data.load("synthetic", num_train=6, num_eval=3, seed=7, data_path=None)
    again, _ = data.load("synthetic", num_train=6, num_eval=3, seed=7, data_path=None)
    other, _ = data.load("synthetic", num_train=6, num_eval=3, seed=8, data_path=None)
    assert (len(train), len(eval_)) == (6, 3)
    assert train["question"] == again["question"] and train["answer"] == again["answer"]
    assert train["question"] != other["question"]
    assert not set(train["question"]) & set(eval_["question"])
    assert all(float(a) == float(a) for a in train["answer"])  # numeric gold answers


def test_jsonl_reads_the_gsm8k_layout(shared_data):
    folder = shared_data / "gsm8k"
    train, eval_ = data.load("jsonl", num_train=5, num_eval=4, seed=0, data_path=str(folder))
    assert (len(train), len(eval_)) == (5, 4)
    first = json.loads((folder / "test.jsonl").open().readline())
    assert eval_[0]["question"] == first["question"]
    assert eval_[0]["answer"] == first["answer"].split("####")[-1].strip().replace(",", "")


def test_jsonl_errors_say_what_and_where(tmp_path):
    with pytest.raises(ValueError, match="needs data_path"):
        data.load("jsonl", 1, 1, 0, None)
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        data.load("jsonl", 1, 1, 0, str(tmp_path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        data.from_jsonl(bad, "train", 10)
    with pytest.raises(ValueError, match="unknown dataset 'gsm9k'"):
        data.load("gsm9k", 1, 1, 0, None)
