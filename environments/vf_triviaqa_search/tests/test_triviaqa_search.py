"""vf-triviaqa-search with the real environment, retriever and rubric; the policy is a scripted stand-in for the
model (an object with the OpenAI client's `chat.completions.create`), so that rewards can be checked exactly."""

from __future__ import annotations

import json
from functools import cache

import pytest
import verifiers as vf
from hypothesis import given
from hypothesis import strategies as st
from vf_triviaqa_search import load_environment
from vf_triviaqa_search.data import load_triviaqa_file
from vf_triviaqa_search.protocols import NO_CALL_REPLY, SEARCH_FEW_SHOT
from vf_triviaqa_search.rewards import contains_alias, normalize_triviaqa, xml_tag_reward

from rlvr.data.factworld import FactWorld
from rlvr.retrieval import BM25Retriever
from rlvr.rollouts import assign_advantages, from_state, group_by_example
from rlvr.testing import Reply, ScriptedClient

# The environment's defaults, so the scripted oracle can look facts up in the same world.
WORLD = dict(world_seed=0, num_entities=300)
SMALL = dict(num_train_examples=10, num_eval_examples=5)


@cache
def oracle_facts() -> dict[str, dict]:
    """question -> FactWorld record (entity, answer) for the default synthetic world."""
    world = FactWorld.generate(seed=WORLD["world_seed"], num_entities=WORLD["num_entities"])
    return {q["question"]: q for q in world.single_hop_questions(None)}


def question_of(messages) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def xml_search(query: str) -> str:
    return f'<reasoning>\nI need to look this up.\n</reasoning>\n<tool>{{"name": "wiki_search", "args": {{"query": {json.dumps(query)}}}}}</tool>'


def xml_answer(answer: str) -> str:
    return f"<reasoning>\nThe passage says so.\n</reasoning>\n<answer>\n{answer}\n</answer>"


def xml_oracle(messages):
    """Searches the entity's name, then answers with the canonical answer: the best possible XML policy."""
    fact = oracle_facts()[question_of(messages)]
    turn = sum(m["role"] == "assistant" for m in messages)
    return {"content": xml_search(fact["entity"]) if turn == 0 else xml_answer(fact["answer"])}


def run(env: vf.Environment, policy, rollouts: int = 2):
    """Rollouts of a policy `messages -> {"content": str, "tool_calls": [(name, arguments)]}`."""

    def as_reply(messages):
        reply = policy(messages)
        return Reply(reply.get("content"), tuple(reply.get("tool_calls", ())))

    client = ScriptedClient(as_reply)
    out = env.evaluate_sync(client=client, model="scripted", num_examples=5, rollouts_per_example=rollouts)
    assert all(s["error"] is None for s in out["state"]), [s["error"] for s in out["state"]]
    return out, client


def turn_rewards(state) -> list[float]:
    return [step["reward"] for step in state["trajectory"]]


def mt_grpo_advantages(states) -> dict[str, tuple[float, ...]]:
    """trajectory id -> per-turn MT-GRPO advantages, computed per group as the trainer does (rlvr.rollouts)."""
    records = {s["trajectory_id"]: from_state(s) for s in states}
    ids = {id(r): t for t, r in records.items()}
    out = {}
    for group in group_by_example(list(records.values())):
        for before, after in zip(group, assign_advantages(group, "mt_grpo", {}), strict=True):
            out[ids[id(before)]] = after.advantages
    return out


# ---- rewards of whole rollouts ----------------------------------------------------------------------------


def test_perfect_xml_policy_gets_the_maximum_reward(tmp_path):
    env = load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path))
    out, client = run(env, xml_oracle)
    assert len(out["state"]) == 10
    for state, reward in zip(out["state"], out["reward"], strict=True):
        # turns: 0.2 x 1/1 tool success + 0.5 answer in the search result; the answer turn has no reward.
        assert turn_rewards(state) == pytest.approx([0.7, 0.0])
        # outcome: 0.5 alias in answer + 1.0 exact match + 0.2 x format 1.0 + 0.2 x XML tags 1.0 = 1.9
        assert reward == pytest.approx(1.9)
        assert state["metrics"]["exact_match"] == 1.0
        result = state["completion"][1]["content"]
        assert result.startswith("<result>\n") and state["answer"] in result
    # Identical rollouts of a prompt carry no learning signal: every advantage is 0.
    assert all(a == pytest.approx(0.0) for adv in mt_grpo_advantages(out["state"]).values() for a in adv)
    # The XML protocol keeps its stop strings in the output, whatever the caller's sampling arguments.
    assert all(r["stop"] == ["</tool>", "</answer>"] for r in client.requests)
    assert all(r["extra_body"]["include_stop_str_in_output"] is True for r in client.requests)


def test_policy_that_never_searches_gets_no_turn_reward(tmp_path):
    """Answering right away (even correctly) earns the outcome rewards but nothing for the turn."""
    env = load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path))
    out, _ = run(env, lambda messages: {"content": xml_answer(oracle_facts()[question_of(messages)]["answer"])})
    for state, reward in zip(out["state"], out["reward"], strict=True):
        assert turn_rewards(state) == [0.0]
        assert state["metrics"]["turn_reward"] == 0.0
        assert reward == pytest.approx(1.9)


def test_searching_beats_guessing_in_advantage(tmp_path):
    """One group mixing a searching and a guessing rollout: MT-GRPO gives the search turn the higher advantage."""
    env = load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path))
    calls = {"n": 0}

    def half_search(messages):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            calls["n"] += 1
            if calls["n"] % 2 == 0:
                return {"content": xml_answer("I do not know")}
        return xml_oracle(messages)

    out, _ = run(env, half_search)
    searched = [s for s in out["state"] if len(s["trajectory"]) == 2]
    guessed = [s for s in out["state"] if len(s["trajectory"]) == 1]
    assert searched and guessed
    advantages = mt_grpo_advantages(out["state"])
    first_turn = {t: adv[0] for t, adv in advantages.items()}
    assert min(first_turn[s["trajectory_id"]] for s in searched) > max(first_turn[s["trajectory_id"]] for s in guessed)


def test_searching_again_earns_no_more_turn_reward(tmp_path):
    """Only the first search result counts for the answer reward, and the tool-execution reward is the change to the
    rollout's success ratio (1/1 -> 2/2: none): repeating a search cannot farm turn reward (issue 21)."""
    env = load_environment(**WORLD, **SMALL, max_turns=3, index_cache_dir=str(tmp_path))

    def search_twice(messages):
        fact = oracle_facts()[question_of(messages)]
        turn = sum(m["role"] == "assistant" for m in messages)
        return {"content": xml_search(fact["entity"]) if turn < 2 else xml_answer(fact["answer"])}

    out, _ = run(env, search_twice)
    for state in out["state"]:
        assert turn_rewards(state) == pytest.approx([0.7, 0.0, 0.0])


def test_perfect_native_policy(tmp_path):
    env = load_environment(**WORLD, **SMALL, protocol="native", index_cache_dir=str(tmp_path))

    def native_oracle(messages):
        fact = oracle_facts()[question_of(messages)]
        if not any(m["role"] == "tool" for m in messages):
            arguments = json.dumps({"query": fact["entity"]})
            return {"content": "<reasoning>\nSearch first.\n</reasoning>", "tool_calls": [("wiki_search", arguments)]}
        return {"content": xml_answer(fact["answer"])}

    out, _ = run(env, native_oracle)
    for state, reward in zip(out["state"], out["reward"], strict=True):
        assert turn_rewards(state) == pytest.approx([0.7, 0.0])
        # Format of the tool-call turn: 0.4 x 1/2 fields + 0.2 spacing + 0.2 starts with <reasoning> + 0 (does not
        # end with </answer>) = 0.6; answer turn 1.0; mean 0.8. Outcome = 0.5 + 1.0 + 0.2 x 0.8 + 0.2 x 1.0.
        assert reward == pytest.approx(1.86)
        assert state["completion"][1]["role"] == "tool" and state["answer"] in state["completion"][1]["content"]


# ---- malformed calls --------------------------------------------------------------------------------------

MALFORMED = [
    ('<tool>{"name": "wiki_search", "args": {"query": </tool>', "not valid JSON"),
    ('<tool>{"name": "web_search", "args": {"query": "x"}}</tool>', "unknown tool 'web_search'; available tools: wiki_search"),
    ('<tool>["wiki_search", "x"]</tool>', "the <tool> content must be a JSON object, got array"),
    ('<tool>{"name": 3, "args": {}}</tool>', 'must be a JSON object with a string "name"'),
    ('<tool>{"name": "wiki_search", "args": "Paris"}</tool>', '"args" of wiki_search must be a JSON object, got str'),
    ('<tool>{"name": "wiki_search", "args": {"q": "Paris"}}</tool>', "wiki_search has no argument 'q'; call it with {\"query\": <string>}"),
    ('<tool>{"name": "wiki_search", "args": {"query": ' + "[" * 5000 + "}</tool>", "nests more than 16 levels"),
    ('<tool>{"name": "wiki_search", "args": {"query": "' + "x" * 2000 + '"}}</tool>', "write a name or a few keywords"),
    ('<tool>{"name": "wiki_search", "args": {"query": "  "}}</tool>', "'query' must be a non-empty string"),
]


@pytest.mark.parametrize(("call", "message"), MALFORMED)
def test_malformed_xml_call_gets_an_error_result(tmp_path, call, message):
    env = load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path))
    out, _ = run(env, lambda messages: {"content": f"<reasoning>\nhm\n</reasoning>\n{call}"}, rollouts=1)
    for state in out["state"]:
        reply = state["completion"][1]["content"]
        assert reply.startswith("<result>\nError: ") and message in reply
        assert len(state["trajectory"]) == 2 and turn_rewards(state) == [0.0, 0.0]


@pytest.mark.parametrize("outcome_needs_answer", [True, False])
def test_reply_without_call_or_answer_is_told_the_format(tmp_path, outcome_needs_answer):
    env = load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path), outcome_needs_answer=outcome_needs_answer)
    out, _ = run(env, lambda messages: {"content": "I think it is Paris."}, rollouts=1)
    for state, reward in zip(out["state"], out["reward"], strict=True):
        assert state["completion"][1] == {"role": "user", "content": NO_CALL_REPLY}
        assert turn_rewards(state) == [0.0, 0.0]
        # No answer: a failed outcome, 0. The original rubric still pays XMLParser's spacing point, which a message
        # without fields gets vacuously: 0.2 x (0.2 + 0.2) / 2.
        assert reward == pytest.approx(0.0 if outcome_needs_answer else 0.04)


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("wiki_search", '{"query": ', "Error: "),
        ("web_search", '{"query": "x"}', "Error: unknown tool 'web_search'; available tools: wiki_search"),
        ("wiki_search", '["x"]', "Error: the arguments of wiki_search must be a JSON object, got array"),
        ("wiki_search", '{"query": 7}', "Error: argument 'query' of wiki_search must be a string, got integer"),
    ],
)
def test_malformed_native_call_gets_an_error_result(tmp_path, name, arguments, message):
    env = load_environment(**WORLD, **SMALL, protocol="native", index_cache_dir=str(tmp_path))

    def policy(messages):
        if any(m["role"] == "tool" for m in messages):
            return {"content": xml_answer("x")}
        return {"content": "", "tool_calls": [(name, arguments)]}

    out, _ = run(env, policy, rollouts=1)
    for state in out["state"]:
        tool_reply = state["completion"][1]
        assert tool_reply["role"] == "tool" and tool_reply["content"].startswith(message)
        assert turn_rewards(state) == [0.0, 0.0]


# ---- corpus, index cache, real samples --------------------------------------------------------------------


def test_cached_index_is_reused(tmp_path, monkeypatch):
    builds = []
    original = BM25Retriever._build

    def counting_build(self, *args, **kwargs):
        builds.append(self.backend)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(BM25Retriever, "_build", counting_build)
    load_environment(**WORLD, **SMALL, index_cache_dir=str(tmp_path))
    load_environment(**WORLD, **SMALL, seed=7, index_cache_dir=str(tmp_path))  # other questions, same corpus
    assert builds == ["bm25s"]
    load_environment(world_seed=1, num_entities=300, **SMALL, index_cache_dir=str(tmp_path))  # other corpus
    load_environment(**WORLD, **SMALL, bm25_backend="rank_bm25", index_cache_dir=str(tmp_path))
    assert builds == ["bm25s", "bm25s", "rank_bm25"]
    assert len([p for p in tmp_path.iterdir() if not p.name.startswith(".")]) == 3


def test_real_samples_load(shared_data, tmp_path):
    triviaqa, wiki = shared_data / "triviaqa", shared_data / "wiki_corpus"
    env = load_environment(
        dataset="jsonl",
        data_path=str(triviaqa / "triviaqa_test_sample800.jsonl"),
        corpus=str(wiki / "flashrag_wiki18_dpr_sample1000.jsonl"),
        num_train_examples=-1,
        num_eval_examples=50,
        index_cache_dir=str(tmp_path),
    )
    assert len(env.eval_dataset) == 50 and len(env.dataset) == 750
    by_question = {json.loads(line)["question"]: json.loads(line) for line in (triviaqa / "triviaqa_test_sample800.jsonl").open()}
    for row in env.eval_dataset:
        record = by_question[row["question"]]
        assert row["answer"] == record["answers"][0]
        # Blank aliases (the sample has some) are dropped: an empty answer must not match them.
        assert row["info"]["aliases"] == list(dict.fromkeys(a for a in record["answers"] if a.strip()))
    # The search tool reads the wiki-18 layout: the title on the first line, then the passage.
    assert env.tools["wiki_search"]("Evan Morris lobbyist Genentech").startswith("Evan Morris\nEvan Morris Evan L. Morris")

    official = load_environment(
        dataset="jsonl",
        data_path=str(triviaqa / "triviaqa_official_format_sample.json"),
        corpus=str(wiki / "r1searcher_filtered_kilt_sample_100.jsonl"),
        num_train_examples=0,
        num_eval_examples=1,
        protocol="native",
        index_cache_dir=str(tmp_path),
    )
    row = official.eval_dataset[0]
    assert row["question"] == "Which Lloyd Webber musical premiered in the US on 10th December 1993?"
    assert row["answer"] == "Sunset Boulevard" and "Sunset Blvd." in row["info"]["aliases"]
    passage = official.tool_map["wiki_search"]("first letter of the alphabet")
    assert passage.startswith("A\n") and len(passage) <= 1000 + len(" ...")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(dataset="squad"), "unknown dataset='squad'"),
        (dict(protocol="json"), "unknown protocol='json'"),
        (dict(max_turns=1), "use >= 2"),
        (dict(corpus="wiki.jsonl"), "leave corpus unset"),
        (dict(dataset="jsonl", corpus="wiki.jsonl"), "needs data_path="),
        (dict(dataset="jsonl", data_path="q.jsonl"), "needs corpus="),
        (dict(relations=["height"]), "unknown FactWorld relations ['height']"),
    ],
)
def test_bad_arguments_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_environment(**kwargs)


def test_hub_row_layout(tmp_path):
    """Rows as `mandarjoshi/trivia_qa` (config rc) gives them: value first, then aliases and normalized aliases."""
    row = {
        "question": "Which Lloyd Webber musical premiered in the US on 10th December 1993?",
        "question_id": "tc_33",
        "answer": {"value": "Sunset Boulevard", "aliases": ["Sunset Blvd", "Sunset Boulevard"],
                   "normalized_aliases": ["sunset blvd", "sunset boulevard"], "normalized_value": "sunset boulevard"},
    }  # fmt: skip
    path = tmp_path / "hub.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (loaded,) = load_triviaqa_file(path)
    assert loaded == {
        "id": "tc_33",
        "question": row["question"],
        "answer": "Sunset Boulevard",
        "aliases": ["Sunset Boulevard", "Sunset Blvd", "sunset blvd", "sunset boulevard"],
    }


def test_unsupported_data_file_names_the_line(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"question": "Q?", "answers": ["A"]}\n{"query": "Q?", "label": "A"}\n')
    with pytest.raises(ValueError, match=r"q.jsonl:2: unsupported TriviaQA record \(keys: \['label', 'query'\]\)"):
        load_environment(dataset="jsonl", data_path=str(path), corpus=str(path))


# ---- answer matching --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("Fat Larry’s Band", "fat larry s band"),  # curly apostrophe -> space, as the official script
        ("The_Beatles", "beatles"),
        ("  A Tale of Two Cities. ", "tale of two cities"),
        ("Yuri Gagarin", "yuri gagarin"),
    ],
)
def test_normalize_triviaqa_hand_cases(raw, normalized):
    assert normalize_triviaqa(raw) == normalized


def test_contains_alias_matches_whole_words():
    assert contains_alias("It was Yuri Gagarin, in 1961.", ["Gagarin"])
    assert contains_alias("fat larry's band had the hit", ["Fat Larry’s Band"])
    assert not contains_alias("He took the bus", ["US"])
    assert not contains_alias("founded in 1946", ["194"])


@given(st.text())
def test_normalization_is_idempotent(text):
    once = normalize_triviaqa(text)
    assert normalize_triviaqa(once) == once


@given(st.text(min_size=1), st.text(), st.text())
def test_an_alias_is_found_wherever_it_stands(alias, before, after):
    if normalize_triviaqa(alias):
        assert contains_alias(f"{before} {alias} {after}", [alias])


def test_xml_tag_reward_hand_cases():
    parser = vf.XMLParser(fields=["reasoning", ("tool", "answer")])
    good = [{"role": "assistant", "content": "<reasoning>a</reasoning><answer>b</answer>"}]
    doubled = [{"role": "assistant", "content": "<reasoning>a</reasoning><reasoning>b</reasoning><answer>c</answer>"}]
    unclosed = [{"role": "assistant", "content": "<reasoning>a<answer>c</answer>"}]
    assert xml_tag_reward(good, parser) == 1.0
    assert xml_tag_reward(doubled, parser) == pytest.approx((0 + 0 + 1 + 1) / 4)
    assert xml_tag_reward(unclosed, parser) == pytest.approx((1 + 0 + 1 + 1) / 4)
    assert xml_tag_reward([{"role": "assistant", "content": "no tags"}], parser) == 0.0
    # The mean over messages, floored at 0 (a message with many repeats can go negative on its own).
    assert xml_tag_reward(good + [{"role": "assistant", "content": "<answer>" * 5}], parser) == 0.0


# ---- the search-tag protocol (small models) ---------------------------------------------------------------


def search_oracle(messages):
    """The best search-protocol policy; the prompt starts with the protocol's one-example few-shot."""
    question = [m["content"] for m in messages if m["role"] == "user" and not m["content"].startswith("<result>")][-1]
    fact = oracle_facts()[question]
    turn = sum(m["role"] == "assistant" for m in messages) - 2  # the few-shot holds two assistant messages
    return {"content": f"<search>{fact['entity']}</search>" if turn == 0 else f"<answer>{fact['answer']}</answer>"}


def test_perfect_search_tag_policy_gets_the_maximum_reward(tmp_path):
    env = load_environment(**WORLD, **SMALL, protocol="search", index_cache_dir=str(tmp_path))
    out, client = run(env, search_oracle)
    for state, reward in zip(out["state"], out["reward"], strict=True):
        assert turn_rewards(state) == pytest.approx([0.7, 0.0])  # 0.2 tool success + 0.5 answer in the result
        assert reward == pytest.approx(1.9)  # 0.5 contains + 1.0 exact + 0.2 format + 0.2 tags
        assert state["completion"][1]["content"].startswith("<result>\n")
        assert from_state(state).first_result_turn == 0
    assert all(r["stop"] == ["</search>", "</answer>"] for r in client.requests)
    prompt = out["prompt"][0]
    assert prompt[2]["content"] == "<search>Velmora</search>"  # the few-shot example sits before the question


def test_search_tag_protocol_errors_and_guessing(tmp_path):
    env = load_environment(**WORLD, **SMALL, protocol="search", index_cache_dir=str(tmp_path))
    first_turn = len(SEARCH_FEW_SHOT) + 2  # system + few-shot + question
    out, _ = run(env, lambda messages: {"content": "<search> </search>" if len(messages) == first_turn else "Paris."})
    for state in out["state"]:
        completion = state["completion"]
        assert completion[1]["content"] == (
            "<result>\nError: empty search; write a name or keywords inside <search> tags\n</result>"
        )
        assert [m["content"] for m in completion[::2]] == ["<search> </search>", "Paris."]  # max_turns=2 ends it
        assert turn_rewards(state) == [0.0, 0.0]  # the failed search earns no tool-execution reward
        assert state["metrics"]["exact_match"] == 0.0


def search_then(second_turn: str):
    """A search-protocol policy: the right search, then `second_turn` where the answer is due."""

    def policy(messages):
        question = [m["content"] for m in messages if m["role"] == "user" and not m["content"].startswith("<result>")]
        fact = oracle_facts()[question[-1]]
        return {"content": f"<search>{fact['entity']}</search>" if messages[-1]["content"] == question[-1]
                else second_turn}

    return policy


@pytest.mark.parametrize("outcome_needs_answer", [True, False])
def test_searching_again_where_the_answer_is_due(tmp_path, outcome_needs_answer):
    """Issue 44. A second <search> in the answer turn ends the rollout unexecuted (max_turns=2, as the paper's
    max_steps=2). By default it scores as a failed outcome, 0, below a wrong answer (0.2 format + 0.2 tags = 0.4),
    so in a group where every rollout misses the answer MT-GRPO's answer-turn advantage favours answering. With the
    paper's rubric as it was (outcome_needs_answer=False) the non-answer keeps its format scores, ties with the wrong
    answer, and no advantage pushes against searching again: the demo's collapse."""
    env = load_environment(**WORLD, **SMALL, protocol="search", index_cache_dir=str(tmp_path),
                           outcome_needs_answer=outcome_needs_answer)
    again, _ = run(env, search_then("<search>Ostrelamen</search>"))
    wrong, _ = run(env, search_then("<answer>Ostrelamen</answer>"))
    for state in again["state"]:
        assert [m["content"] for m in state["completion"][2:]] == ["<search>Ostrelamen</search>"]  # not run
        assert turn_rewards(state) == pytest.approx([0.7, 0.0])  # the search turn's reward is the same
        assert state["metrics"]["tool_execution_reward"] == 1.0  # 1 of 1 calls ran: the second is no call
    assert again["reward"] == pytest.approx([0.0 if outcome_needs_answer else 0.4] * 10)
    assert wrong["reward"] == pytest.approx([0.4] * 10)
    # One all-fail group per example: two rollouts that search again, two that answer wrongly.
    states = []
    for i, state in enumerate([*again["state"], *wrong["state"]]):
        state["trajectory_id"] = f"rollout-{i}"
        states.append(state)
    advantages = mt_grpo_advantages(states)
    answer_turn = {"again": [advantages[s["trajectory_id"]][1] for s in states[:10]],
                   "wrong": [advantages[s["trajectory_id"]][1] for s in states[10:]]}
    if outcome_needs_answer:
        assert max(answer_turn["again"]) < 0 < min(answer_turn["wrong"])
    else:
        assert all(a == pytest.approx(0.0) for a in answer_turn["again"] + answer_turn["wrong"])
