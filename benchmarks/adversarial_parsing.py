"""What issue 21's adversarial outputs cost to parse, before (the regexes) and after (rlvr's linear parsers).

  xml_tag        `<answer>` + N spaces, no closing tag: verifiers' / rlvr's old `<tag>\\s*(.*?)\\s*</tag>` search
                 against rlvr.rubrics.parsing.tagged (what XMLParser.parse now uses)
  webshop_action `search[` repeated: vf-webshop's old findall(r"\\b(?:search|click)\\[[^\\]\\n]+\\]") against
                 parse_agent_action
  code_blocks    `<code>` repeated, never closed: vf-gsm8k-code's old re.sub(r"<code>.*?</code>") against without_code
  tool_json      5,000 nested brackets: json.loads (RecursionError) against rlvr.tools.parse_json_object (refused)
  answer         numerically_equal("10^10^10", "72"): refused without evaluation (unbounded math-verify: > 30 s)
Seconds per call, the best of --repeats; the old versions only at sizes where they finish in seconds (their growth
is the point: x2 input, x8 time for the cubic one, x4 for the quadratic ones). Writes
benchmarks/results/adversarial_parsing.json (atomically). Never asserted in tests; the 2 cores are shared.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from vf_gsm8k_code.answers import numerically_equal, without_code
from vf_webshop.env import parse_agent_action

from rlvr.io import atomic_write_json
from rlvr.rubrics.parsing import tagged
from rlvr.tools import ToolCallError, parse_json_object

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
OLD_TAG = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL)
OLD_ACTION = re.compile(r"\b(?:search|click)\[[^\]\n]+\]")
OLD_CODE = re.compile(r"<code>.*?</code>", re.DOTALL)


def best_of(repeats: int, parse, text: str) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        parse(text)
        times.append(time.perf_counter() - start)
    return round(min(times), 6)


def old_json(text: str) -> None:
    try:
        json.loads(text)
    except RecursionError:
        pass


def new_json(text: str) -> None:
    try:
        parse_json_object(text, what="arguments", example="{}")
    except ToolCallError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "adversarial_parsing.json")
    args = parser.parse_args()
    r = args.repeats
    cases = {
        "xml_tag": ("<answer> + N spaces", [500, 1000, 2000], [2000, 200_000], lambda n: "<answer>" + " " * n,
                    lambda t: OLD_TAG.search(t), lambda t: tagged(t, "answer")),
        "webshop_action": ("'search[' x N", [5_000, 10_000, 20_000], [20_000, 30_000],
                           lambda n: "search[" * n, OLD_ACTION.findall, parse_agent_action),
        "code_blocks": ("'<code>' x N", [1_250, 2_500, 5_000], [5_000, 35_000], lambda n: "<code>" * n,
                        lambda t: OLD_CODE.sub("", t), without_code),
        "tool_json": ("'[' x N", [5_000], [5_000, 200_000], lambda n: "[" * n, old_json, new_json),
    }
    results: dict = {"repeats": r, "cases": {}}
    for name, (what, old_sizes, new_sizes, make, old, new) in cases.items():
        entry = {"input": what, "old": {}, "new": {}}
        for n in old_sizes:
            entry["old"][n] = best_of(r, old, make(n))
        for n in new_sizes:
            entry["new"][n] = best_of(r, new, make(n))
        results["cases"][name] = entry
        print(name, json.dumps(entry))
    results["cases"]["answer"] = {"input": "numerically_equal('10^10^10', '72')",
                                  "new": best_of(r, lambda text: numerically_equal(text, "72"), "10^10^10")}
    print("answer", results["cases"]["answer"])
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
