"""The environment's tool, state tracking and rewards on a real MuSiQue record (no model needed)."""

import asyncio
import json

import pytest
import verifiers as vf
from vf_musique import load_environment
from vf_musique.rewards import (
    citation_precision,
    citation_recall,
    exact_match,
    hop_weighted_reward,
    new_supporting_retrieved,
    retrieval_precision,
    retrieval_recall,
    token_f1,
)


@pytest.fixture(scope="module")
def env(shared_data):
    return load_environment(
        dataset="musique",
        data_path=str(shared_data / "musique" / "musique_ans_sample100.jsonl"),
        num_train_examples=0,
        num_eval_examples=100,
        top_k=2,
    )


def _row(env, record_id):
    (row,) = [r for r in env.eval_dataset if r["info"]["id"] == record_id]
    return row


def _call(env, state, query):
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "retrieve_documents", "arguments": json.dumps({"query": query})},
            }
        ],
    }
    state["trajectory"].append({"completion": [message]})
    return asyncio.run(env.env_response([message], state))


def test_tool_searches_only_the_questions_paragraphs_and_tracks_retrievals(env):
    row = _row(env, "2hop__150763_14904")  # supporting: 6 (publisher), 10 (APA's first president)
    state = {"info": row["info"], "trajectory": [], "retrievals": [], "retrieved_ids": []}
    (reply,) = _call(env, state, "Journal of Psychotherapy Integration publisher")
    assert reply["role"] == "tool" and reply["content"].startswith("[6] ")
    assert state["retrievals"][0]["turn"] == 0 and state["retrievals"][0]["ids"][0] == "6"
    _call(env, state, "first president of the American Psychological Association")
    assert "10" in state["retrievals"][1]["ids"] and state["retrievals"][1]["turn"] == 1
    assert state["retrieved_ids"] == list(
        dict.fromkeys(state["retrievals"][0]["ids"] + state["retrievals"][1]["ids"])
    )
    # Every id shown belongs to this question's 20 paragraphs.
    assert set(state["retrieved_ids"]) <= {str(p["idx"]) for p in row["info"]["paragraphs"]}
    (error,) = _call(env, state, "  ")
    assert "non-empty" in error["content"]

    # Turn rewards: a supporting paragraph counts in the turn that first retrieves it.
    turn0 = new_supporting_retrieved(turn_index=0, state=state, info=row["info"])
    turn1 = new_supporting_retrieved(turn_index=1, state=state, info=row["info"])
    assert (turn0, turn1) == (0.5, 0.5)
    assert turn0 + turn1 == retrieval_recall(state=state, info=row["info"]) == 1.0
    assert retrieval_precision(state=state, info=row["info"]) == pytest.approx(
        2 / len(state["retrieved_ids"])
    )

    answer = {
        "role": "assistant",
        "content": "<answer>Stanley Hall</answer>\n<citations>6, 10, 3</citations>",
    }
    kw = dict(completion=[answer], answer=row["answer"], info=row["info"], parser=env.parser, state=state)
    assert exact_match(**kw) == 1.0 and token_f1(**kw) == 1.0  # matches the alias "Stanley Hall"
    assert citation_precision(**kw) == pytest.approx(2 / 3) and citation_recall(**kw) == 1.0
    # 2 hops -> weight 1; answer F1 1 + 0.5 x citation F1 (P=2/3, R=1 -> 0.8).
    assert hop_weighted_reward(**kw) == pytest.approx(1.0 + 0.5 * 0.8)


def test_golden_retriever_shows_the_supporting_paragraphs(shared_data):
    env = load_environment(
        dataset="musique", data_path=str(shared_data / "musique" / "musique_ans_sample100.jsonl"),
        retriever="golden", num_train_examples=0, num_eval_examples=100, top_k=10,
    )  # fmt: skip
    row = _row(env, "2hop__150763_14904")
    state = {"info": row["info"], "trajectory": [], "retrievals": [], "retrieved_ids": []}
    _call(env, state, "anything")
    assert state["retrieved_ids"] == ["6", "10"]


def test_semantic_retriever_runs_offline_in_the_env(shared_data, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RLVR_HOME", str(tmp_path))
    env = load_environment(retriever="semantic", num_train_examples=0, num_eval_examples=2, top_k=1)
    row = env.eval_dataset[0]
    state = {"info": row["info"], "trajectory": [], "retrievals": [], "retrieved_ids": []}
    first_supporting = next(p for p in row["info"]["paragraphs"] if p["is_supporting"])
    (reply,) = _call(env, state, first_supporting["title"])
    assert reply["content"].startswith(f"[{first_supporting['idx']}] {first_supporting['title']}")


def test_bad_arguments_explain_themselves():
    with pytest.raises(ValueError, match="unknown dataset='squad'"):
        load_environment(dataset="squad")
    with pytest.raises(ValueError, match="unknown retriever='tfidf'"):
        load_environment(retriever="tfidf")
    with pytest.raises(ValueError, match="needs data_path"):
        load_environment(dataset="hotpotqa")
    with pytest.raises(ValueError, match="max_turns=1"):
        load_environment(max_turns=1)
    assert isinstance(load_environment(num_train_examples=2, num_eval_examples=1), vf.ToolEnv)
