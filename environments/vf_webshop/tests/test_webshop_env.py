"""load_environment: datasets, determinism, rollouts through verifiers with a scripted policy, vf-eval."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from vf_webshop import load_environment, parse_agent_action
from vf_webshop.engine import Session, parse_action
from vf_webshop.env import ONE_SHOT_EXAMPLE, SYSTEM_PROMPT
from vf_webshop.expert import expert_action

from rlvr.testing import ScriptedClient


def rows(dataset) -> list[tuple[str, str]]:
    return [(r["question"], r["info"]) for r in dataset]


def test_parse_agent_action():
    assert parse_agent_action("Thought: buy it.\nAction: click[Buy Now]") == "click[Buy Now]"
    assert parse_agent_action("search[red shoes] ... no, click[< Prev]") == "click[< Prev]"
    assert parse_agent_action("I will buy it") == ""
    # the input that took 13 s with the regex (issue 21), and its closed twin
    assert parse_agent_action("search[" * 30_000) == ""
    assert parse_agent_action("search[" * 30_000 + "]") == "search[" + "search[" * 29_999 + "]"


ACTION_PIECES = st.sampled_from(["search[", "click[", "]", "[", "\n", " ", "a", "xsearch[", "_click[", "é"])


@given(st.lists(ACTION_PIECES, max_size=16).map("".join))
def test_action_parsers_match_the_original_regexes(text):
    found = re.findall(r"\b(?:search|click)\[[^\]\n]+\]", text)
    assert parse_agent_action(text) == (found[-1] if found else "")
    m = re.match(r"(.+)\[(.+)\]", text)  # WebShop engine.py parse_action
    assert parse_action(text) == ((text, None) if m is None else (m.group(1), m.group(2)))


def test_datasets_are_seeded():
    a = load_environment(seed=0, num_eval_examples=10)
    b = load_environment(seed=0, num_eval_examples=10)
    c = load_environment(seed=1, num_eval_examples=10)
    assert rows(a.eval_dataset) == rows(b.eval_dataset) and rows(a.dataset) == rows(b.dataset)
    assert rows(a.eval_dataset) != rows(c.eval_dataset)
    assert len(a.eval_dataset) == 10 and len(a.dataset) > 50
    eval_goals = {r["info"] for r in a.eval_dataset}
    assert eval_goals.isdisjoint(r["info"] for r in a.dataset)


def test_held_out_rows_say_whether_their_product_was_a_training_target():
    # the pipeline's arguments (configs/pipelines/webshop_rl_cpu.toml): its README counted by hand 19 of the 25
    # products of the 50 held-out goals among the 26 training targets, i.e. 74 of 100 rollouts (2 a goal) -> 37 goals
    env = load_environment(num_train_examples=-1, num_eval_examples=50)
    targets = set(env.dataset["answer"])
    infos = [json.loads(i) for i in env.eval_dataset["info"]]
    assert [i["target_in_training"] for i in infos] == [i["goal"]["asin"] in targets for i in infos]
    assert len(targets) == 26 and sum(i["target_in_training"] for i in infos) == 37
    assert len({i["goal"]["asin"] for i in infos if i["target_in_training"]}) == 19
    assert all("target_in_training" not in json.loads(i) for i in env.dataset["info"])  # training rows: no flag
    few = load_environment(num_train_examples=2, num_eval_examples=50)  # only the goals it trains on count
    assert [json.loads(i)["target_in_training"] for i in few.eval_dataset["info"]] == [
        i["goal"]["asin"] in set(few.dataset["answer"]) for i in infos]


def test_one_shot_example_shows_valid_actions_and_gives_no_answer_away():
    env = load_environment(one_shot=True, num_eval_examples=4)
    assert env.system_prompt == SYSTEM_PROMPT + ONE_SHOT_EXAMPLE
    assert load_environment(num_eval_examples=4).system_prompt == SYSTEM_PROMPT
    assert load_environment(one_shot=True, num_eval_examples=4, system_prompt="Shop.").system_prompt == (
        "Shop." + ONE_SHOT_EXAMPLE)
    replies = [line.removeprefix("Reply: ") for line in ONE_SHOT_EXAMPLE.splitlines() if line.startswith("Reply: ")]
    assert [parse_agent_action(r) for r in replies] == replies == [
        "search[dimmable desk lamp]", "click[S09000A1B2]", "click[black]", "click[Buy Now]"]
    assert Session(env.shop, json.loads(env.eval_dataset[0]["info"])["goal"]).step(replies[0]).valid
    example_ids = set(re.findall(r"S09\w{7}", ONE_SHOT_EXAMPLE))
    assert example_ids and example_ids.isdisjoint(env.shop.products)
    assert not any("lamp" in p["Title"].lower() for p in env.shop.products.values())


def test_webshop_files_dataset(webshop_files):
    env = load_environment(dataset="webshop", num_eval_examples=5, num_train_examples=20, **webshop_files)
    assert len(env.eval_dataset) == 5 and len(env.dataset) == 20
    goal = json.loads(env.eval_dataset[0]["info"])["goal"]
    assert env.eval_dataset[0]["answer"] == goal["asin"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(dataset="amazon"), "unknown dataset"),
        (dict(dataset="webshop"), "needs products_path"),
        (dict(human_goals=True), "needs human_instructions_path"),
        (dict(history_turns=0), "history_turns must be None"),
        (
            dict(dataset="webshop", products_path="/nope.jsonl", attributes_path="/nope.json"),
            "documents file not found",
        ),
    ],
)
def test_bad_arguments_say_what_to_do(kwargs, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_environment(**kwargs)


def expert_policy(goals_by_instruction):
    def policy(messages):
        goal = goals_by_instruction[messages[1]["content"].split(" [SEP] ")[2]]
        searches = sum(m["role"] == "assistant" and "search[" in m["content"] for m in messages)
        return f"Thought: next step.\nAction: {expert_action(messages[-1]['content'], goal, searches)}"

    return policy


def test_turn_rewards_cannot_be_farmed_by_searching_again_and_again():
    """Alternating a hitting search and click[Back to Search] earned 0.1 per search before (0.8 in 15 turns, issue
    21); the rollout's first hit is paid, the rest are not."""
    env = load_environment(num_eval_examples=2, max_turns=12)
    goals = [json.loads(r["info"])["goal"] for r in env.eval_dataset]

    def farmer(messages):
        goal = next(g for g in goals if g["instruction_text"] in messages[1]["content"])
        searched = sum(m["role"] == "assistant" and "search[" in m["content"] for m in messages)
        on_search_page = messages[-1]["content"].split("\n")[-1].startswith("WebShop")
        return f"search[{goal['name']}]" if on_search_page and searched < 6 else "click[Back to Search]"

    out = asyncio.run(env.evaluate(ScriptedClient(farmer), "farmer", num_examples=2))
    for state in out["state"]:
        hits = [s["extras"]["turn_rewards"]["search_hit"] for s in state["trajectory"]]
        searches = sum(s["extras"]["webshop"]["action"].startswith("search[") for s in state["trajectory"])
        assert searches == 6 and hits.count(1.0) == 1 and sum(hits) == 1.0
        assert state["metrics"]["turn_reward"] == pytest.approx(0.1)


def test_expert_rollouts_through_verifiers():
    env = load_environment(num_eval_examples=4)
    goals = {g["instruction_text"]: g for g in (json.loads(r["info"])["goal"] for r in env.eval_dataset)}
    client = ScriptedClient(expert_policy(goals))
    out = asyncio.run(env.evaluate(client, "expert", num_examples=4, rollouts_per_example=2))
    assert out["reward"] == [1.0] * 8
    assert out["metrics"]["success"] == [1.0] * 8
    for state in out["state"]:
        steps = state["trajectory"]
        assert steps[-1]["extras"]["webshop"]["action"] == "click[Buy Now]"
        assert state["stop_condition"] == "has_final_env_response"
        assert state["completion"][-1]["content"].startswith("Thank you for shopping with us!")
        keys = [s["extras"]["state_key"] for s in steps]
        assert keys[0] == "search" and keys[1].startswith("results|") and keys[-1].startswith("item|")
        turn = [s["extras"]["turn_rewards"] for s in steps]
        assert turn[0]["search_hit"] == 1.0  # the expert's own product is on the first results page
        assert any(t["target_click"] == 1.0 for t in turn)
        assert all(t["valid_action"] == 1.0 for t in turn)


def test_a_history_window_changes_the_prompts_only():
    """history_turns=1: the prompt of turn k holds the system prompt, the first page (with the instruction, and a
    note on the turns left out) and the last exchange, ending with the page the model acts on; the shop's pages,
    anchor states and rewards are those of the whole history, and so is the recorded conversation."""
    whole, window = load_environment(num_eval_examples=4), load_environment(num_eval_examples=4, history_turns=1)
    goals = {g["instruction_text"]: g for g in (json.loads(r["info"])["goal"] for r in whole.eval_dataset)}
    full = asyncio.run(whole.evaluate(ScriptedClient(expert_policy(goals)), "expert", num_examples=4))["state"]
    windowed = asyncio.run(window.evaluate(ScriptedClient(expert_policy(goals)), "expert", num_examples=4))["state"]
    assert max(len(s["trajectory"]) for s in full) >= 3  # at least one turn left out
    for f, w in zip(full, windowed, strict=True):
        head = f["prompt"]
        assert w["prompt"] == head and [m["role"] for m in head] == ["system", "user"]
        assert head[0]["content"] == SYSTEM_PROMPT and "Instruction:" in head[1]["content"]
        assert len(w["trajectory"]) == len(f["trajectory"])
        for k, (fs, ws) in enumerate(zip(f["trajectory"], w["trajectory"], strict=True)):
            assert fs["prompt"] == [*head, *f["completion"][: 2 * k]]  # None: the whole history, as before
            note = f"\n\n[{k - 1} earlier turn{'s' if k - 1 != 1 else ''} omitted]" if k > 1 else ""
            assert ws["prompt"][:2] == [head[0], {**head[1], "content": head[1]["content"] + note}]
            assert ws["prompt"][2:] == f["completion"][2 * max(0, k - 1) : 2 * k]  # the last exchange
            assert ws["extras"]["state_key"] == fs["extras"]["state_key"]
            assert ws["extras"]["webshop"] == fs["extras"]["webshop"] and ws["reward"] == fs["reward"]
            assert ws["extras"]["turn_rewards"] == fs["extras"]["turn_rewards"]
            assert ws["extras"]["tool_result"] == fs["extras"]["tool_result"]  # TurnRubric found each page
        assert w["reward"] == f["reward"] == 1.0 and w["metrics"] == f["metrics"]
        assert w["completion"] == f["completion"]


def test_invalid_replies_run_to_max_turns_without_crashing():
    env = load_environment(num_eval_examples=2, max_turns=4)
    client = ScriptedClient(lambda messages: "I would like to buy shoes")
    out = asyncio.run(env.evaluate(client, "babbler", num_examples=2))
    assert out["reward"] == [0.0, 0.0]
    for state in out["state"]:
        assert state["stop_condition"] == "max_turns_reached" and len(state["trajectory"]) == 4
        assert [s["extras"]["webshop"]["state_key"] for s in state["trajectory"]] == ["search"] * 4
        assert [s["extras"]["state_key"] for s in state["trajectory"]] == ["search"] * 4  # on every step, always
        assert all(s["extras"]["turn_rewards"]["valid_action"] == 0.0 for s in state["trajectory"])
        assert state["completion"][1]["content"].startswith("Invalid action ''")


@pytest.mark.slow
def test_vf_eval_against_rlvr_serve(tiny_server, tmp_path, vf_eval):
    _, rows = vf_eval("vf-webshop", tiny_server, tmp_path, num_examples=2, rollouts=1, max_tokens=64)
    assert all(0.0 <= row["reward"] <= 1.0 for row in rows)
