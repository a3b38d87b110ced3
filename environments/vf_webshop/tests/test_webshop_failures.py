"""python -m vf_webshop.failures: each saved rollout's failure kind, on rollouts played on the real shop engine
(the scripted expert's, and variations of it that fail in each way)."""

from __future__ import annotations

import json

import pytest
from vf_webshop import load_environment
from vf_webshop.engine import Session
from vf_webshop.expert import run_expert
from vf_webshop.failures import classify, main, tally


@pytest.fixture(scope="module")
def shop_goals():
    env = load_environment(num_train_examples=4, num_eval_examples=8, max_turns=8)
    goals = [json.loads(r["info"])["goal"] if isinstance(r["info"], str) else r["info"]["goal"]
             for r in env.get_eval_dataset(8)]
    return env.shop, goals


def play(shop, goal: dict, actions: list[str], seen: bool = True) -> dict:
    """A row as an evaluation saves it: the messages of `actions` played on a fresh session, the shop's success."""
    session = Session(shop, goal)
    completion = []
    for action in actions:
        result = session.step(action)
        completion += [{"role": "assistant", "content": action}, {"role": "user", "content": result.observation}]
    success = float(session.reward >= 1.0)
    return {"completion": completion, "success": success, "info": {"goal": goal, "target_in_training": seen}}


def with_options(goals):
    return next(g for g in goals if any(g["goal_options"].values()))


def test_each_kind_on_the_real_shop(shop_goals):
    shop, goals = shop_goals
    goal = with_options(goals)
    expert = run_expert(Session(shop, goal))
    assert classify(play(shop, goal, expert)) == ("success", set())

    search, product = expert[0], f"click[{goal['asin']}]"
    assert classify(play(shop, goal, [search, product, "click[Buy Now]"])) == ("options missed", set())

    listed = Session(shop, goal)
    listed.step(search)
    other = next(a for a in listed.listed() if a != goal["asin"])
    kind, flags = classify(play(shop, goal, [search, f"click[{other}]", "click[Buy Now]"]))
    assert kind == "other product" and flags == set()

    # WebShop's held-out failure after RL: an id that no page lists, clicked until the turn limit
    wrong = "S" + ("0" if goal["asin"][1] != "0" else "1") + goal["asin"][2:]
    row = play(shop, goal, [search] + [f"click[{wrong}]"] * 7)
    assert row["completion"][3]["content"].startswith("Invalid action")
    assert classify(row) == ("no purchase", {"stuck", "miscopied id"})
    # an invalid Buy Now (on the results page) is not a purchase
    assert classify(play(shop, goal, [search, "click[Buy Now]"]))[0] == "no purchase"


def test_tally_splits_by_memorised_goals(shop_goals):
    shop, goals = shop_goals
    goal = with_options(goals)
    expert = run_expert(Session(shop, goal))
    rows = [play(shop, goal, expert, seen=True), play(shop, goal, expert[:1], seen=False),
            play(shop, goal, expert[:1] * 3, seen=False)]
    counts = tally(rows)
    assert counts["all"]["rollouts"] == 3 and counts["all"]["success"] == 1 and counts["all"]["no purchase"] == 2
    assert counts["memorised"]["success"] == 1 and counts["unseen"]["no purchase"] == 2
    assert counts["unseen"]["stuck"] == 1 and counts["all"]["miscopied id"] == 0


def test_command_reads_an_evaluation_tree_and_names_bad_input(shop_goals, tmp_path, capsys):
    shop, goals = shop_goals
    goal = with_options(goals)
    unit = tmp_path / "study" / "cells" / "grpo" / "seed-0" / "eval"
    unit.mkdir(parents=True)
    rows = [play(shop, goal, run_expert(Session(shop, goal))), play(shop, goal, ["search[x]"])]
    (unit / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    main([str(tmp_path / "study"), "--json", str(tmp_path / "counts.json")])
    out = capsys.readouterr().out
    assert "| cells/grpo/seed-0/eval | 2 | 1 | 1 | 0 | 0 | 0 | 0 | 0 |" in out
    saved = json.loads((tmp_path / "counts.json").read_text())
    assert saved["cells/grpo/seed-0/eval"]["all"]["success"] == 1
    # a file that also counts units run elsewhere: theirs are kept, this directory's are rewritten
    elsewhere = {"all": {"rollouts": 200, "success": 150}}
    (tmp_path / "counts.json").write_text(json.dumps({"base/seed-0/eval": elsewhere,
                                                      "cells/grpo/seed-0/eval": elsewhere}))
    main([str(tmp_path / "study"), "--json", str(tmp_path / "counts.json")])
    saved = json.loads((tmp_path / "counts.json").read_text())
    assert list(saved) == ["base/seed-0/eval", "cells/grpo/seed-0/eval"] and saved["base/seed-0/eval"] == elsewhere
    assert saved["cells/grpo/seed-0/eval"]["all"]["success"] == 1
    capsys.readouterr()

    main([str(tmp_path / "study" / "cells"), str(unit)])  # several roots: each named too
    out = capsys.readouterr().out
    assert "| cells/grpo/seed-0/eval | 2 |" in out and "| eval | 2 |" in out

    with pytest.raises(SystemExit, match="no results.jsonl under it"):
        main([str(tmp_path / "nothing")])
    (unit / "results.jsonl").write_text(json.dumps({"completion": [], "info": {}}) + "\n")
    with pytest.raises(SystemExit, match="no info.goal; is it a vf-webshop evaluation"):
        main([str(tmp_path / "study")])


def test_a_line_that_is_not_json_is_named(tmp_path):
    unit = tmp_path / "eval"
    unit.mkdir()
    (unit / "results.jsonl").write_text('{"completion": []}\n{"cut off\n')
    with pytest.raises(SystemExit, match=r"results.jsonl:2 is not valid JSON"):
        main([str(tmp_path)])
