"""rlvr view on a real run: tiny-random trained for 2 MT-GRPO steps against the session's `training_server` (the
trainer tests' script; conftest's `mt_grpo_run`, which the token log's test reads too), then opened in Chromium: the
run, a token-logged rollout (colours and hover values against the trainer's token_credit.jsonl), its group, and the
export from file://."""

from __future__ import annotations

import json

import pytest
from selenium.webdriver.common.by import By

from conftest import LiveServer, check_rollout_tokens, no_script_ran, wait_for
from rlvr.view.export import export_html

pytestmark = pytest.mark.slow


def test_a_real_run_in_chromium(browser, mt_grpo_run, tmp_path):
    records = [json.loads(line) for line in (mt_grpo_run / "token_credit.jsonl").read_text().splitlines()]
    assert records and all(r["format"] == "rlvr.token_credit/1" for r in records)
    with LiveServer(mt_grpo_run) as server:
        browser.get(server.url + "/")
        wait_for(browser, ".chart .main-svg")
        assert f"{len(records)} logged rollouts" in browser.find_element(By.TAG_NAME, "main").text
        browser.find_element(By.LINK_TEXT, "browse rollouts").click()
        wait_for(browser, "table.list")
        assert f"{len(records)} of {len(records)} rollouts" in browser.find_element(By.CSS_SELECTOR, ".count").text
        # the list puts token_credit.jsonl's lines first, in file order: row i is line i
        pick = max(range(len(records)), key=lambda i: max(abs(a) for s in records[i]["samples"]
                                                          for a in s["advantage"]))
        browser.get(server.url + f"/rollouts?page={pick // 50 + 1}")
        browser.find_element(By.LINK_TEXT, str(pick)).click()
        wait_for(browser, ".messages .tok")
        check_rollout_tokens(browser, records[pick])
        no_script_ran(browser)
        browser.find_element(By.PARTIAL_LINK_TEXT, "its group").click()
        members = wait_for(browser, ".group .member")
        same_group = [r for r in records if (r["step"], r["batch_index"], r["group"]) ==
                      (records[pick]["step"], records[pick]["batch_index"], records[pick]["group"])]
        assert len(members) == len(same_group)
    out, kept, total = export_html(mt_grpo_run, tmp_path / "run.html")
    assert kept == total == len(records)
    browser.get(out.as_uri() + f"#rollout-{pick}")
    wait_for(browser, f"#rollout-{pick} .messages .tok")
    browser.execute_script("document.querySelectorAll('section.page[hidden]').forEach(s => s.remove())")
    check_rollout_tokens(browser, records[pick])
