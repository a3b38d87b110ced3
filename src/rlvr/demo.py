"""`rlvr demo`, the main job: evaluate SmolLM2-135M, train it with MT-GRPO, evaluate again, write a report.

Offline, on CPU, on embedded defaults. The environment is vf-triviaqa-search on its synthetic fact world with the
`search` protocol: the paper's JSON tool calls are beyond a 135M model (0 valid calls in 16 sampled rollouts),
while `<search>name</search>` comes out about half of the time, so the groups have the spread that GRPO learns from
and the turn reward (a search that runs and finds the answer) has room to rise. One server serves the base
evaluation, the training rollouts (taking every weight update) and the final evaluation.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from rich.console import Console  # noqa: E402

from rlvr import evaluation  # noqa: E402
from rlvr.analysis import outcome_fell  # noqa: E402
from rlvr.io import atomic_write_json, atomic_write_text  # noqa: E402

console = Console()

# The numbers the report compares before and after training: the task's outcome first, then the turn-level signal.
KEY_METRICS = ("exact_match", "answered", "turn_reward", "tool_execution_reward", "answer_in_first_search_result", "reward")


ALGO_NAMES = {"mt_grpo": "MT-GRPO", "grpo": "GRPO-OR"}


@dataclass
class DemoSettings:
    model: str = "smollm2-135m"
    env: str = "vf-triviaqa-search"
    env_args: dict = field(default_factory=lambda: {
        "protocol": "search", "num_train_examples": 256, "num_eval_examples": 24, "max_turns": 2,
    })
    algo: str = "mt_grpo"
    # 6 steps keep `make demo` within 20 minutes on 2 cores (629 s on an idle machine, issue 44); what they do to
    # exact match over seeds: benchmarks/demo_seeds.py, docs/demo.md.
    steps: int = 6
    batch_size: int = 16  # rollouts per step
    rollouts_per_example: int = 8  # group size
    learning_rate: float = 5e-5
    temperature: float = 0.7  # 1.0 makes a 135M model ramble; 0.7 keeps half the groups' rollouts on format
    max_tokens_per_turn: int = 32  # a search or an answer is a few tokens
    eval_examples: int = 24
    eval_rollouts: int = 2
    seed: int = 0


def demo_config(settings: DemoSettings, run_dir: Path):
    from rlvr.trainer import build_config

    return build_config(settings.algo, dict(
        output_dir=str(run_dir), max_steps=settings.steps, seed=settings.seed,
        batch_size=settings.batch_size, rollouts_per_example=settings.rollouts_per_example,
        micro_batch_size=4, max_tokens_per_turn=settings.max_tokens_per_turn, max_seq_len=1024,
        temperature=settings.temperature, learning_rate=settings.learning_rate,
        num_iterations=1, save_steps=settings.steps, logging_steps=1, report_to="none", progress=True,
        num_logged_rollouts=settings.batch_size,  # every rollout: what the answer turn does, step by step
        use_lora=False,  # full fine-tuning: RLConfig defaults to LoRA, and the final sync loads model.safetensors
    ))


def _evaluate(env, server, settings: DemoSettings, label: str) -> dict:
    console.rule(f"[bold]{label}")
    results = evaluation.run_rollouts(
        env, base_url=server.base_url, model=server.model, num_examples=settings.eval_examples,
        rollouts_per_example=settings.eval_rollouts,
        sampling_args={"temperature": settings.temperature, "max_tokens": settings.max_tokens_per_turn},
    )
    rollouts = evaluation.rollouts_of(results)
    summary = evaluation.summarize(rollouts)
    summary["answered"] = evaluation.mean_stderr([env.parser.parse_answer(r.completion) is not None for r in rollouts])
    console.print(evaluation.summary_table(summary, label))
    return {"results": results, "summary": summary}


def _plot(metrics_path: Path, before: dict, after: dict, out_png: Path, algo: str) -> None:
    from rlvr.analysis import read_jsonl

    steps = [r for r in read_jsonl(metrics_path) if "loss" in r]
    fig, (curve, bars) = plt.subplots(1, 2, figsize=(12, 4.2))
    for key, label in (("turn/1/reward", "turn 1 (search) reward"), ("reward", "outcome reward")):
        points = [(r["step"], r[key]) for r in steps if key in r]
        if points:
            curve.plot(*zip(*points, strict=True), marker="o", label=label)
    curve.set_xlabel("training step")
    curve.set_ylabel("mean over the step's rollouts")
    curve.set_title(f"{algo} training rollouts")
    curve.grid(alpha=0.3)
    curve.legend()
    names = [m for m in KEY_METRICS if m in before["summary"] and m in after["summary"]]
    xs = range(len(names))
    for offset, (label, run) in ((-0.2, ("before", before)), (0.2, ("after", after))):
        stats = [run["summary"][m] for m in names]
        bars.bar([x + offset for x in xs], [s.mean for s in stats], 0.4, yerr=[s.stderr for s in stats],
                 label=label, capsize=3)
    bars.set_xticks(list(xs), names, rotation=20, ha="right")
    bars.set_title("evaluation: base model vs trained (mean ± s.e.)")
    bars.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    plt.close(fig)


def verdict(before: dict, after: dict) -> str:
    """Plain words, the task's outcome first: exact match beside the turn reward, and a warning when training lowered
    the held-out outcome (a turn reward that rises while the model stops answering is no success: issue 44)."""
    b, a = before["summary"], after["summary"]

    def change(metric: str, label: str) -> str:
        diff, se = a[metric].mean - b[metric].mean, math.hypot(a[metric].stderr, b[metric].stderr)
        size = f"{diff / se:+.1f} standard errors" if se > 0 else "no sampling error"
        return f"{label} {b[metric].mean:.3f} -> {a[metric].mean:.3f} ({diff:+.3f}, {size})"

    lines = outcome_fell(b, a)
    lines.append("; ".join(change(m, label) for m, label in (("exact_match", "Exact match"), ("turn_reward", "turn "
                                                                 "reward (the search turn)")) if m in b and m in a) + ".")
    if "exact_match" in b and a["exact_match"].mean <= b["exact_match"].mean:
        lines.append("Training did not raise the exact match within this budget: see the README's demo section for "
                     "what the default does over seeds.")
    return "\n\n".join(lines)


def write_report(run_dir: Path, settings: DemoSettings, before: dict, after: dict, timings: dict) -> Path:
    rows = []
    for name in [*KEY_METRICS, *(m for m in before["summary"] if m not in KEY_METRICS)]:
        if name in before["summary"] and name in after["summary"]:
            b, a = before["summary"][name], after["summary"][name]
            rows.append(f"| {name} | {b.mean:.3f} ± {b.stderr:.3f} | {a.mean:.3f} ± {a.stderr:.3f} | "
                        f"{a.mean - b.mean:+.3f} |")
    table = "\n".join(["| metric | before | after | change |", "|---|---|---|---|", *rows])
    timing = "\n".join(f"| {k} | {v:.1f} |" for k, v in timings.items())
    text = f"""# rlvr demo: {ALGO_NAMES.get(settings.algo, settings.algo)} on {settings.env} with {settings.model}

{verdict(before, after)}

Evaluation on the same {settings.eval_examples} held-out questions, {settings.eval_rollouts} sampled rollouts each
(temperature {settings.temperature}), before and after {settings.steps} {ALGO_NAMES.get(settings.algo, settings.algo)} steps of {settings.batch_size}
rollouts ({settings.batch_size // settings.rollouts_per_example} prompts x {settings.rollouts_per_example}).
Turn 1 is the search turn; its reward is 0.2 for a search that runs plus 0.5 when the result holds the answer.
Turn 2 must answer: `answered` is the share of rollouts that end with an `<answer>`; one that does not (e.g. searches
again) scores 0 on every outcome term.

![demo](demo.png)

{table}

| stage | seconds |
|---|---|
{timing}

Settings: `{json.dumps(asdict(settings))}`

Training run (metrics.jsonl, rollouts.jsonl, token_credit.jsonl, checkpoints): `train/`; `rlvr view {run_dir}/train`
shows every turn's credit. Both evaluations' numbers: `summary.json`. Evaluations in vf-eval's layout:
`eval_before/`, `eval_after/`. `rlvr analyze {run_dir}` redraws the plots.
"""
    return atomic_write_text(run_dir / "report.md", text)


def run_demo(settings: DemoSettings, run_dir: Path) -> Path:
    from rlvr import models
    from rlvr.serve import launch, load_saved_weights
    from rlvr.trainer import run_training

    timings: dict[str, float] = {}
    start = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / "settings.json", asdict(settings))
    with console.status(f"preparing {settings.model}..."):
        models.prepare(settings.model)
        env = evaluation.load_env(settings.env, settings.env_args)
    console.print(f"starting rlvr serve for {settings.model}...")
    # float32, the trainer's dtype on CPU: the sampler's logprobs are then the trainer's (vLLM would serve bf16)
    with launch(model=settings.model, dtype="float32") as server:
        timings["setup and server start"] = time.perf_counter() - start

        mark = time.perf_counter()
        before = _evaluate(env, server, settings, "before training")
        evaluation.save_results(before["results"], run_dir / "eval_before")
        timings["evaluation before"] = time.perf_counter() - mark

        mark = time.perf_counter()
        console.rule(f"[bold]{ALGO_NAMES.get(settings.algo, settings.algo)} training: {settings.steps} steps")
        run_training(env, settings.model, demo_config(settings, run_dir / "train"), server_url=server.url)
        timings["training"] = time.perf_counter() - mark

        timings["final weight sync"] = load_saved_weights(server.url, run_dir / "train" / "final")
        mark = time.perf_counter()
        after = _evaluate(env, server, settings, "after training")
        evaluation.save_results(after["results"], run_dir / "eval_after")
        timings["evaluation after"] = time.perf_counter() - mark
    timings["total"] = time.perf_counter() - start
    _plot(run_dir / "train" / "metrics.jsonl", before, after, run_dir / "demo.png", settings.algo)
    atomic_write_json(run_dir / "summary.json", {
        "before": {k: asdict(v) for k, v in before["summary"].items()},
        "after": {k: asdict(v) for k, v in after["summary"].items()}, "timings": timings})
    return write_report(run_dir, settings, before, after, timings)
