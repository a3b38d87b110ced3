"""Why WebShop rollouts failed, read from saved evaluations (each directory's results.jsonl, as `rlvr evaluate` and a
study's units write them), so that two models' held-out rollouts can be told apart by what went wrong, not only by
how often.

Each rollout gets one kind:
  success         the rubric's success (the goal's product with its options within the price)
  no purchase     never bought: the turn limit came first
  other product   bought a product other than the goal's
  options missed  bought the goal's product without clicking every option value the instruction asks for
  other           bought the goal's product with its options, and the reward still fell short (e.g. the price)
and two flags that cut across the kinds:
  stuck           two or more of its actions repeat the action before them (rlvr.rollouts.repeated_turns)
  miscopied id    clicked a product id the page did not list (the shop answered "Invalid action"): the id was
                  copied wrong from the results page or recalled from training
Counts are given over all rollouts and over the goals whose product was a training target of the SFT model
(`info.target_in_training`, which vf-webshop's held-out rows carry) and the others.

    python -m vf_webshop.failures runs/pipeline-webshop/rl_paired [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.analysis import read_jsonl
from rlvr.io import atomic_write_json
from rlvr.rollouts import repeated_turns

KINDS = ("success", "no purchase", "other product", "options missed", "other")
FLAGS = ("stuck", "miscopied id")
PRODUCT_CLICK = re.compile(r"click\[\s*(S[0-9A-Z]{9}|B[0-9A-Z]{9})\s*\]", re.IGNORECASE)
OPTION_CLICK = re.compile(r"click\[\s*([^\]]+?)\s*\]")
NOT_OPTIONS = {"buy now", "back to search", "next >", "< prev", "description", "features", "reviews"}


def _actions(completion: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(the assistant's reply, the shop's answer to it) per turn."""
    turns = []
    for k, message in enumerate(completion):
        if message.get("role") == "assistant":
            answer = completion[k + 1].get("content", "") if k + 1 < len(completion) else ""
            turns.append((str(message.get("content") or ""), str(answer or "")))
    return turns


def classify(row: Mapping[str, Any]) -> tuple[str, set[str]]:
    """One saved rollout's kind and flags."""
    turns = _actions(row["completion"])
    flags = set()
    if repeated_turns(row["completion"]) >= 2:
        flags.add("stuck")
    if any(PRODUCT_CLICK.search(reply) and answer.startswith("Invalid action") for reply, answer in turns):
        flags.add("miscopied id")
    if row.get("success", 0) > 0.5:
        return "success", flags
    valid = [reply for reply, answer in turns if not answer.startswith("Invalid action")]
    if not any("buy now" in reply.lower() for reply in valid):
        return "no purchase", flags
    products = [m.group(1).upper() for reply in valid if (m := PRODUCT_CLICK.search(reply))]
    goal = row["info"]["goal"]
    if not products or products[-1] != goal["asin"].upper():
        return "other product", flags
    clicked = {m.group(1).lower() for reply in valid if (m := OPTION_CLICK.search(reply))} - NOT_OPTIONS
    wanted = {str(v).lower() for v in (goal.get("goal_options") or {}).values() if v}
    return ("options missed" if wanted - clicked else "other"), flags


def tally(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Counts of each kind and flag: over all rows, and split by whether the goal's product was a training target."""
    groups: dict[str, Counter] = {"all": Counter(), "memorised": Counter(), "unseen": Counter()}
    for row in rows:
        kind, flags = classify(row)
        seen = row.get("info", {}).get("target_in_training")
        for name in ("all", *(() if seen is None else ("memorised" if seen else "unseen",))):
            groups[name].update([kind, *flags, "rollouts"])
    return {name: {key: counts[key] for key in ("rollouts", *KINDS, *FLAGS)} for name, counts in groups.items()}


def read_rows(results: Path) -> list[dict]:
    try:
        return read_jsonl(results)
    except (OSError, ValueError) as err:  # read_jsonl names the line that is not JSON
        raise SystemExit(f"not an evaluation's results.jsonl: {err}") from err


def evaluations(root: Path) -> list[Path]:
    """Every results.jsonl under `root` (an evaluation directory, a study, a pipeline), in path order."""
    found = sorted(root.rglob("results.jsonl")) if root.is_dir() else []
    if not found:
        raise SystemExit(f"{root}: no results.jsonl under it; give an evaluation directory or a study's (e.g. "
                         "runs/pipeline-webshop/rl_paired)")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m vf_webshop.failures", description=__doc__.split("\n\n")[0])
    parser.add_argument("directories", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="also write the counts here (atomically); the evaluations an existing "
                        "file holds and these directories do not (units that ran on another machine) are kept")
    args = parser.parse_args(argv)
    table = {}
    for root in args.directories:
        for results in evaluations(root):
            rows = read_rows(results)
            if rows and "goal" not in (rows[0].get("info") or {}):
                raise SystemExit(f"{results}: its rows have no info.goal; is it a vf-webshop evaluation?")
            where = results.parent.relative_to(root)  # under one root its path; under several, the root's name too
            table[str(where if len(args.directories) == 1 else root.name / where)] = tally(rows)
    header = ["evaluation", "n", *KINDS, *FLAGS]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))  # a Markdown table
    for name, groups in table.items():
        for group, counts in groups.items():
            if counts["rollouts"]:
                label = name if group == "all" else f"{group} goals"
                print("| " + " | ".join([label, *(str(counts[k]) for k in ("rollouts", *KINDS, *FLAGS))]) + " |")
    if args.json:
        # a committed file also counts the units of earlier machines, whose evaluations this run directory lacks
        kept = json.loads(args.json.read_text()) if args.json.is_file() else {}
        atomic_write_json(args.json, dict(sorted({**kept, **table}.items())))
        print(f"wrote {args.json} ({len(table)} evaluations read, {len(set(kept) - set(table))} kept from it)",
              file=sys.stderr)


if __name__ == "__main__":
    main()
