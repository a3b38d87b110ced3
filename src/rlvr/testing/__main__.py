"""python -m rlvr.testing REPORTS.jsonl SUMMARY.json: merge a fuzz run's reports (RLVR_FUZZ_REPORT lines) into one
row per environment, written as JSON and shown as a table."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlvr.io import atomic_write_json
from rlvr.testing.fuzz import summarize


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Merge RLVR_FUZZ_REPORT lines into one row per environment.")
    parser.add_argument("reports", type=Path, help="the JSON-lines file RLVR_FUZZ_REPORT pointed at")
    parser.add_argument("summary", type=Path, help="where to write the merged rows (JSON)")
    args = parser.parse_args(argv)
    rows = summarize([json.loads(line) for line in args.reports.read_text().splitlines() if line.strip()])
    atomic_write_json(args.summary, {"reports": args.reports.name, "environments": rows})
    table = Table("environment", "rollouts", "rollout errors", "max rollout s", "max scoring s", "reward seen",
                  "turn reward seen", "max turn sum")
    for m in rows:
        table.add_row(m["environment"], str(m["rollouts"]), str(sum(m["errors"].values())),
                      f"{m['max_rollout_s']:.2f}", f"{m['max_scoring_s']:.2f}",
                      "[{:.2f}, {:.2f}]".format(*m["reward_range"]), "[{:.2f}, {:.2f}]".format(*m["turn_reward_range"]),
                      f"{m['max_turn_total']:.2f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
