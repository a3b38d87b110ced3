"""`rlvr demo` over seeds (issue 44): does training raise the held-out exact match, seed after seed?

One cell = one `rlvr demo` run (rlvr.demo.run_demo: base evaluation, training, evaluation after) with a given
algorithm, seed and rubric variant, everything else the demo's defaults:
- algorithms: `mt_grpo` (the demo's) and `grpo` (GRPO-OR, outcome-only credit, the paper's baseline);
- variants: `answer_required` (the default rubric: a rollout that ends without an <answer> scores 0 on every
  outcome term) and `format_credit` (the paper's rubric as it was: such a rollout keeps its format scores, as much
  as a wrong answer gets; the rubric under which the demo stopped answering).

Each cell's result is written atomically to benchmarks/results/demo_seeds/cells/<variant>-<algo>-seed<S>.json as
soon as it finishes; a cell whose file exists is skipped, so the same command resumes (a cell cut off mid-run starts
over). Several invocations with disjoint cells may run at once. The aggregate (report.md, summary.json) is rewritten
after every cell and by --report-only: per cell, exact match, tool execution and the answered share before and
after, the first training step at which a rollout searched where it had to answer, and per step the credit the
search turn and the answer turn got in groups where every rollout missed (token_credit.jsonl); per algorithm and
variant, the paired difference after - before over seeds (mean, 95% Student t interval, seeds higher) and, per
seed, MT-GRPO - GRPO-OR after training.

    nice -n 10 .venv/bin/python benchmarks/demo_seeds.py --seeds 0 1 2 3 4 --algos mt_grpo grpo
    .venv/bin/python benchmarks/demo_seeds.py --report-only
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from pathlib import Path

from rlvr.analysis import markdown_table, read_jsonl
from rlvr.io import atomic_write_json, atomic_write_text
from rlvr.rubrics.parsing import tagged
from rlvr.study.stats import paired_difference

RESULTS = Path(__file__).resolve().parent / "results" / "demo_seeds"
VARIANTS = {"answer_required": {}, "format_credit": {"outcome_needs_answer": False}}
METRICS = ("exact_match", "tool_execution_reward", "answered", "turn_reward", "reward")
PER_EXAMPLE = ("exact_match", "tool_execution_reward")  # columns of the evaluations' results.jsonl


def cell_name(variant: str, algo: str, seed: int) -> str:
    return f"{variant}-{algo}-seed{seed}"


def answer_turn_searches(rollouts_jsonl: Path) -> dict[int, float]:
    """Per training step, the share of logged rollouts whose second assistant turn (where the answer is due)
    holds a <search> instead of an answer."""
    out = {}
    for line in read_jsonl(rollouts_jsonl):
        turns = [[m for m in r["completion"] if m.get("role") == "assistant"] for r in line["rollouts"]]
        second = [str(t[1].get("content") or "") for t in turns if len(t) > 1]
        if line["rollouts"]:
            out[line["step"]] = sum(tagged(c, "search") is not None for c in second) / len(line["rollouts"])
    return out


def _second_turn(completion: list[dict]) -> str | None:
    turns = [str(m.get("content") or "") for m in completion if m.get("role") == "assistant"]
    return turns[1] if len(turns) > 1 else None


def credit_by_step(token_credit: Path) -> list[dict]:
    """What credit the trainer gave each turn, step by step, from token_credit.jsonl (every group of the demo's
    batches is logged): the share of rollouts that searched again where they had to answer; and, in the groups where
    every rollout missed the answer (exact match 0 throughout), the mean advantage of the search turn (turn 1) and
    of the answer turn (turn 2), the latter apart for rollouts that searched again and rollouts that answered. Every
    token of a turn carries its turn's advantage (rlvr.credit.tokens.expand_to_tokens)."""
    groups: dict[tuple[int, int], list[dict]] = {}
    for r in read_jsonl(token_credit):
        groups.setdefault((r["step"], r["group"]), []).append(r)
    steps: dict[int, dict] = {}
    for (step, _), members in sorted(groups.items()):
        row = steps.setdefault(step, {"step": step, "rollouts": 0, "searched_again": 0, "all_fail_groups": 0,
                                      "groups": 0, "_turn1": [], "_again": [], "_answered": []})
        row["groups"] += 1
        again = [tagged(_second_turn(r["completion"]) or "", "search") is not None for r in members]
        row["rollouts"] += len(members)
        row["searched_again"] += sum(again)
        if any((r["metrics"].get("exact_match") or 0.0) > 0 for r in members):
            continue
        row["all_fail_groups"] += 1
        for r, a in zip(members, again, strict=True):
            advantages = r["turn_advantages"]
            if advantages:
                row["_turn1"].append(advantages[0])
            if len(advantages) > 1:
                (row["_again"] if a else row["_answered"]).append(advantages[1])

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return [{**{k: v for k, v in row.items() if not k.startswith("_")},
             "all_fail_turn1_advantage": mean(row["_turn1"]),
             "all_fail_answer_turn_advantage_searched_again": mean(row["_again"]),
             "all_fail_answer_turn_advantage_answered": mean(row["_answered"])} for row in steps.values()]


def rescore(rollouts_jsonl: Path) -> list[dict]:
    """Each logged batch of a run made under the old rubric (`format_credit`: every rollout logged), scored again
    under both rubrics: per rollout its outcome and its per-turn advantages for MT-GRPO and GRPO-OR, computed per group
    (the rollouts of one example) by rlvr.credit as the trainer does. The batch is the same under both rubrics
    (seeded sampling), so this isolates what the rubric changes in the credit. `logged_advantages` are the trainer's
    own, for checking the recomputation."""
    from vf_triviaqa_search.protocols import search_parser

    from rlvr.credit import compute_advantages
    from rlvr.rubrics.rewards import is_tool_result

    parser = search_parser()
    out = []
    for line in read_jsonl(rollouts_jsonl):
        groups: dict[int, list[dict]] = {}
        for r in line["rollouts"]:
            groups.setdefault(r["example_id"], []).append(r)
        for example, members in sorted(groups.items()):
            first_result, outcomes = [], {"format_credit": [], "answer_required": []}
            for r in members:
                replies = [m for m in r["completion"] if m.get("role") != "assistant"]
                first_result.append(next((k for k, m in enumerate(replies) if is_tool_result([m])), None))
                outcomes["format_credit"].append(r["reward"])
                answered = parser.parse_answer(r["completion"]) is not None
                outcomes["answer_required"].append(r["reward"] if answered else 0.0)
            turns = [r["turn_rewards"] for r in members]
            credit = {f"{algo}/{rubric}": compute_advantages(algo, turns, outcome, first_result)
                      for algo in ("mt_grpo", "grpo") for rubric, outcome in outcomes.items()}
            for i, r in enumerate(members):
                assistant = [str(m.get("content") or "") for m in r["completion"] if m.get("role") == "assistant"]
                out.append({"step": line["step"], "example_id": example, "turns": assistant,
                            "turn_rewards": r["turn_rewards"], "logged_advantages": r["turn_advantages"],
                            "outcome": {k: v[i] for k, v in outcomes.items()},
                            "advantages": {k: v[i] for k, v in credit.items()}})
    return out


def per_example(eval_dir: Path) -> dict[str, dict[str, float]]:
    """metric -> example id -> mean over that example's held-out rollouts."""
    rows = read_jsonl(eval_dir / "results.jsonl")
    out: dict[str, dict[str, float]] = {}
    for metric in PER_EXAMPLE:
        by_example: dict[str, list[float]] = {}
        for r in rows:
            by_example.setdefault(str(r["example_id"]), []).append(float(r[metric]))
        out[metric] = {k: sum(v) / len(v) for k, v in by_example.items()}
    return out


def run_cell(variant: str, algo: str, seed: int, runs_dir: Path) -> dict:
    from rlvr.demo import DemoSettings, run_demo

    settings = DemoSettings(algo=algo, seed=seed)
    settings.env_args = {**settings.env_args, **VARIANTS[variant]}
    run_dir = runs_dir / cell_name(variant, algo, seed)
    if run_dir.exists():  # cut off mid-run: start over
        shutil.rmtree(run_dir)
    start = time.time()
    run_demo(settings, run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    searches = answer_turn_searches(run_dir / "train" / "rollouts.jsonl")
    return {
        "variant": variant, "algo": algo, "seed": seed, "run_dir": str(run_dir),
        "before": summary["before"], "after": summary["after"], "timings": summary["timings"],
        "per_example": {"before": per_example(run_dir / "eval_before"), "after": per_example(run_dir / "eval_after")},
        "answer_turn_searches": searches,
        "first_step_searching_in_answer_turn": next((s for s, f in sorted(searches.items()) if f > 0), None),
        "wall_s": time.time() - start, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": f"{platform.node()}, {platform.processor() or platform.machine()}",
    }


def _fmt_diff(d) -> str:
    if d.n == 0:
        return "n/a"
    interval = f" [{d.low:+.3f}, {d.high:+.3f}]" if d.n > 1 else " (one seed: no interval)"
    return f"{d.mean:+.3f}{interval}, higher in {d.wins}/{d.n}"


def write_report(results: Path = RESULTS) -> Path:
    cells = []
    for path in sorted((results / "cells").glob("*.json")):
        cell = json.loads(path.read_text())
        token_credit = Path(cell["run_dir"]) / "train" / "token_credit.jsonl"
        if "credit_by_step" not in cell and token_credit.is_file():  # added once, while the run is still here
            cell["credit_by_step"] = credit_by_step(token_credit)
            atomic_write_json(path, cell)
        cells.append(cell)
    groups: dict[tuple[str, str], list[dict]] = {}
    for c in cells:
        groups.setdefault((c["variant"], c["algo"]), []).append(c)
    lines = ["# `rlvr demo` over seeds (benchmarks/demo_seeds.py)", "",
             "SmolLM2-135M on vf-triviaqa-search (`search` protocol, 2 turns), the demo's defaults (6 steps of 16 "
             "rollouts, lr 5e-5); held-out: the same 24 questions x 2 sampled rollouts before and after training. "
             "`answered`: share of rollouts ending with an <answer>. 'answer turn searched from step': the first "
             "training step at which a rollout searched where it had to answer (all 16 rollouts of each step "
             "logged). Intervals: 95% Student t over the per-seed differences.", ""]
    summary: dict = {}
    for (variant, algo), members in sorted(groups.items()):
        members.sort(key=lambda c: c["seed"])
        rows = [[c["seed"], *(f"{c['before'][m]['mean']:.3f} -> {c['after'][m]['mean']:.3f}" for m in METRICS),
                 c["first_step_searching_in_answer_turn"] if c["first_step_searching_in_answer_turn"] is not None
                 else "never", f"{c['wall_s'] / 60:.0f}"] for c in members]
        lines += [f"## {algo}, rubric `{variant}`", "",
                  markdown_table(["seed", *METRICS, "answer turn searched from step", "minutes"], rows), ""]
        for c in members:
            if c.get("credit_by_step"):
                lines += [f"Credit by step, seed {c['seed']} (groups where every rollout missed the answer: mean "
                          "advantage of the search turn, and of the answer turn for rollouts that searched again / "
                          "answered):", "", markdown_table(
                              ["step", "searched again", "all-fail groups", "turn 1", "turn 2, searched again",
                               "turn 2, answered"],
                              [[r["step"], f"{r['searched_again']}/{r['rollouts']}",
                                f"{r['all_fail_groups']}/{r['groups']}",
                                *("-" if r[k] is None else f"{r[k]:+.2f}" for k in (
                                    "all_fail_turn1_advantage", "all_fail_answer_turn_advantage_searched_again",
                                    "all_fail_answer_turn_advantage_answered"))] for r in c["credit_by_step"]]), ""]
        diffs = {}
        for m in METRICS:
            d = paired_difference({c["seed"]: c["after"][m]["mean"] for c in members},
                                  {c["seed"]: c["before"][m]["mean"] for c in members})
            diffs[m] = {"mean": d.mean, "low": d.low, "high": d.high, "n": d.n, "higher": d.wins, "lower": d.losses}
            lines.append(f"- after - before, {m}: {_fmt_diff(d)}")
        summary[f"{variant}/{algo}"] = {"seeds": [c["seed"] for c in members], "after_minus_before": diffs}
        lines.append("")
    for variant in VARIANTS:
        mt, grpo = groups.get((variant, "mt_grpo"), []), groups.get((variant, "grpo"), [])
        if mt and grpo:
            lines += [f"## mt_grpo - grpo after training, rubric `{variant}` (paired by seed)", ""]
            for m in METRICS:
                d = paired_difference({c["seed"]: c["after"][m]["mean"] for c in mt},
                                      {c["seed"]: c["after"][m]["mean"] for c in grpo})
                lines.append(f"- {m}: {_fmt_diff(d)}")
            lines.append("")
    atomic_write_json(results / "summary.json", summary)
    return atomic_write_text(results / "report.md", "\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--algos", nargs="+", default=["mt_grpo", "grpo"], choices=["mt_grpo", "grpo"])
    parser.add_argument("--variants", nargs="+", default=["answer_required"], choices=list(VARIANTS))
    parser.add_argument("--runs-dir", type=Path, default=Path("runs/demo_seeds"), help="the cells' run directories")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the cells' results and the report go")
    parser.add_argument("--rescore", type=Path, metavar="ROLLOUTS_JSONL",
                        help="score a format_credit run's logged batches under both rubrics (see `rescore`); writes "
                             "RESULTS/rescored_<name>.json")
    parser.add_argument("--report-only", action="store_true", help="rewrite report.md from the finished cells")
    args = parser.parse_args()
    if args.rescore:
        name = args.rescore.parent.parent.name  # runs/<cell>/train/rollouts.jsonl
        print(atomic_write_json(args.results / f"rescored_{name}.json", rescore(args.rescore)))
        return
    cells_dir = args.results / "cells"
    if not args.report_only:
        for seed in args.seeds:
            for variant in args.variants:
                for algo in args.algos:
                    out = cells_dir / f"{cell_name(variant, algo, seed)}.json"
                    if out.exists():
                        print(f"{out.name}: done, skipped", flush=True)
                        continue
                    atomic_write_json(out, run_cell(variant, algo, seed, args.runs_dir))
                    print(f"{out.name}: written; report {write_report(args.results)}", flush=True)
    print(write_report(args.results))


if __name__ == "__main__":
    main()
