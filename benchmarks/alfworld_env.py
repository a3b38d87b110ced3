"""vf-alfworld per backend: game generation time, reset and step latency, and success of the expert and of a random
policy, all through the environment itself (verifiers rollouts with a scripted client, scored by its rubric).

The random policy picks uniformly among the commands the game accepts (listed in each observation), ALFWorld's
usual random baseline. Games: generated (fresh cache, so generation is timed), TextWorldExpress twc seeds, and, with
--data-path, ALFWorld's official files (json_2.1.1; all of valid_unseen, one random episode each). Before that, a
number of generator draws per split are planned and checked. The `model` setting (not run by default: it serves a
model) plays a served model (--model, SmolLM2-135M by default) through the same environments with rlvr's own
evaluation loop, greedy and sampled at temperature 1, beside the random policy at the same turn limit. Writes
benchmarks/results/alfworld_env.json atomically.

    .venv/bin/python benchmarks/alfworld_env.py [--games 24] [--rollouts 4] [--max-turns 50] [--data-path DIR]
        [--only generation,generated,official,twc,model]   # re-measure some settings, keep the others in the JSON
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path

from verifiers.utils.async_utils import NullAsyncContext
from vf_alfworld import assets, generate, load_environment
from vf_alfworld.engine import PLANNER_LOCK, planner
from vf_alfworld.expert import expert_states
from vf_alfworld.games import solve
from vf_alfworld.generate import GeneratorConfig

from rlvr import evaluation
from rlvr.io import atomic_write_json
from rlvr.testing.client import ScriptedClient

REPO = Path(__file__).resolve().parent.parent
AVAILABLE = "\n\nAvailable actions: "


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered)) - 1))]


class TimedEngines:
    """The environment's engines, with the wall time of every start and step recorded."""

    def __init__(self, engines):
        self.inner, self.name = engines, engines.name
        self.starts: list[float] = []
        self.steps: list[float] = []

    def _timed(self, into: list[float], func, *args):
        start = time.perf_counter()
        try:
            return func(*args)
        finally:
            into.append(time.perf_counter() - start)

    def start(self, record):
        return self._timed(self.starts, self.inner.start, record)

    def step(self, handle, command):
        return self._timed(self.steps, self.inner.step, handle, command)

    def finish(self, handle):
        return self.inner.finish(handle)


def random_policy(seed: int):
    rng = random.Random(seed)

    def act(messages) -> str:
        observation = messages[-1]["content"]
        commands = observation.rsplit(AVAILABLE, 1)[1].split(", ") if AVAILABLE in observation else ["look"]
        return f"<think>Try something.</think>\n<action>{rng.choice(commands)}</action>"

    return act


async def random_states(env, rollouts: int) -> list:
    """One episode at a time, so that the recorded latencies are the engine's, not time spent queueing."""
    states = []
    for i, row in enumerate(env.get_eval_dataset().to_list()):
        for r in range(rollouts):
            client = ScriptedClient(random_policy(1000 * i + r))
            state = await env.run_rollout(row, client, "random", {}, NullAsyncContext())
            await env.rubric.score_group([state], score_sem=NullAsyncContext())
            states.append(state)
    return states


def summary(states: list) -> dict:
    return {
        "episodes": len(states),
        "success": statistics.fmean(s["metrics"]["won"] for s in states),
        "final_progress": statistics.fmean(s["metrics"]["final_progress"] for s in states),
        "turns_mean": statistics.fmean(len(s["trajectory"]) for s in states),
        "errors": sum(s.get("error") is not None for s in states),
    }


def policy_summary(states: list) -> dict:
    """`summary` plus the binomial standard error of the success rate and how the policy's turns went: the share
    with an action the protocol could read, and the share the game accepted."""
    steps = [step["extras"]["alfworld"] for s in states for step in s["trajectory"]]
    result = summary(states)
    return {**result, "success_stderr": math.sqrt(result["success"] * (1 - result["success"]) / len(states)),
            "turns_with_action": statistics.fmean(step["action"] is not None for step in steps),
            "turns_accepted": statistics.fmean(bool(step["valid"]) for step in steps)}  # fmt: skip


def timings(engines: TimedEngines) -> dict:
    ms = lambda xs: [1000 * x for x in xs]  # noqa: E731
    return {
        "resets": len(engines.starts),
        "reset_ms_p50": percentile(ms(engines.starts), 50),
        "reset_ms_p90": percentile(ms(engines.starts), 90),
        "steps": len(engines.steps),
        "step_ms_p50": percentile(ms(engines.steps), 50),
        "step_ms_p90": percentile(ms(engines.steps), 90),
        "step_ms_mean": statistics.fmean(ms(engines.steps)),
    }


def generation_stats(split: str, draws: int) -> dict:
    """Draws of the generator (seeds `bench/{split}/{i}`): how many fit no task, how many the planner could not
    solve (or solved in a plan that did not win on replay), and the walkthrough lengths of the rest."""
    config = GeneratorConfig()
    floor_plans = tuple(p for p in assets.floor_plans() if (p in assets.UNSEEN_FLOOR_PLANS) == (split == "valid_unseen"))
    no_fit, unsolved, lengths, seconds = 0, 0, [], []
    for i in range(draws):
        start = time.perf_counter()
        drawn = generate.sample_game(f"bench/{split}/{i}", floor_plans, assets.TASK_TYPES[i % 6], config)
        if drawn is None:
            no_fit += 1
            continue
        task, scene, description = drawn
        game = {"pddl_domain": assets.domain_text(), "grammar": generate.grammar_with_task(description),
                "pddl_problem": generate.pddl_problem(scene, task, name="bench")}  # fmt: skip
        with PLANNER_LOCK:
            solved = solve(planner(), game, task, config.max_plan_length)
        seconds.append(time.perf_counter() - start)
        if solved is None:
            unsolved += 1
        else:
            lengths.append(len(solved[1]))
    print(f"generation {split}: {draws} draws, {no_fit} fit no task, {unsolved} unsolved, "
          f"walkthrough {statistics.fmean(lengths):.1f} commands on average")  # fmt: skip
    return {"draws": draws, "fit_no_task": no_fit, "planned_and_checked": len(lengths) + unsolved,
            "unsolved": unsolved, "walkthrough_mean": statistics.fmean(lengths), "walkthrough_max": max(lengths),
            "seconds_per_checked_game_p50": percentile(seconds, 50)}  # fmt: skip


def measure(label: str, env_args: dict, rollouts: int) -> dict:
    start = time.perf_counter()
    env = load_environment(**env_args)
    load_s = time.perf_counter() - start
    expert = summary(asyncio.run(expert_states(env, "eval")))
    env.engines = TimedEngines(env.engines)  # latencies of the sequential random episodes only
    rand = summary(asyncio.run(random_states(env, rollouts)))
    result = {"env_args": {k: v for k, v in env_args.items() if k != "cache_dir"}, "load_s": load_s,
              "expert": expert, "random": rand, **timings(env.engines)}  # fmt: skip
    print(f"{label}: load {load_s:.1f} s | expert success {expert['success']:.3f} in {expert['turns_mean']:.1f} turns | "
          f"random success {rand['success']:.3f} (progress {rand['final_progress']:.3f}, {rand['episodes']} episodes) | "
          f"reset p50 {result['reset_ms_p50']:.1f} ms | step p50 {result['step_ms_p50']:.2f} ms")  # fmt: skip
    return result


def measure_model(label: str, env_args: dict, server, args, samplings: dict[str, tuple[float, int]]) -> dict:
    """A served model on the environment's eval games: one entry per sampling (temperature, rollouts per game), and
    the random policy at the same turn limit. Sampled episodes are not seeded (vLLM samples them)."""
    env = load_environment(**env_args)
    result = {"env_args": env_args, "model": server.model, "max_tokens": args.model_max_tokens,
              "random": policy_summary(asyncio.run(random_states(env, args.rollouts)))}  # fmt: skip
    for name, (temperature, rollouts) in samplings.items():
        start = time.perf_counter()
        results = evaluation.run_rollouts(env, base_url=server.base_url, model=server.model, num_examples=-1,
                                          rollouts_per_example=rollouts,
                                          sampling_args={"temperature": temperature, "max_tokens": args.model_max_tokens})  # fmt: skip
        result[name] = {"temperature": temperature, **policy_summary(results["state"]),
                        "seconds": time.perf_counter() - start}  # fmt: skip
        print(f"{label} {server.model} {name}: success {result[name]['success']:.3f} "
              f"(+- {result[name]['success_stderr']:.3f}, {result[name]['episodes']} episodes), progress "
              f"{result[name]['final_progress']:.3f}, turns with an action {result[name]['turns_with_action']:.2f}, "
              f"accepted {result[name]['turns_accepted']:.2f} | random success {result['random']['success']:.3f}")  # fmt: skip
    return result


def measure_models(args) -> dict:
    """The `model` setting, per --model-backends: generated valid_unseen games (with and without the few-shot
    exchange) and twc, each under its own key."""
    from rlvr.serve import launch

    common = dict(num_train_examples=0, num_eval_examples=args.model_games, max_turns=args.model_max_turns)
    both = {"greedy": (0.0, 1), "sampled_t1": (1.0, args.model_rollouts)}
    backends = set(args.model_backends.split(","))
    results = {}
    with launch(model=args.model) as server:
        if "alfworld" in backends:
            results[f"model_{args.model}_alfworld_generated_valid_unseen"] = measure_model(
                "alfworld", common, server, args, both)
            results[f"model_{args.model}_alfworld_generated_valid_unseen_no_few_shot"] = measure_model(
                "alfworld (no few-shot)", {**common, "num_eval_examples": args.model_games // 3, "few_shot": False},
                server, args, {"greedy": (0.0, 1)})  # fmt: skip
        if "twc" in backends:
            results[f"model_{args.model}_twc"] = measure_model("twc", {**common, "backend": "twc"}, server, args, both)
    return results


SETTINGS = ("generation", "generated", "official", "twc", "model")


def measure_settings(args, only: set[str]) -> dict:
    """The results of the settings in `only`, under the keys they have in the results JSON."""
    common = dict(num_train_examples=0, num_eval_examples=args.games, max_turns=args.max_turns)
    results = {}
    if "generation" in only:
        results.update({f"generation_{split}": generation_stats(split, args.draws) for split in ("train", "valid_unseen")})
    if "generated" in only:
        with tempfile.TemporaryDirectory() as cache:  # fresh cache: generation is part of the measured load time
            for split in ("valid_seen", "valid_unseen"):
                results[f"alfworld_generated_{split}"] = measure(
                    f"alfworld generated {split}", {**common, "eval_split": split, "cache_dir": cache}, args.rollouts
                )
    if "official" in only:  # every official valid_unseen game (134), one random episode each
        results["alfworld_official_valid_unseen"] = measure(
            "alfworld official valid_unseen", {**common, "num_eval_examples": -1, "data_path": args.data_path}, 1
        )
    if "twc" in only:
        results["twc"] = measure("twc", {**common, "backend": "twc"}, args.rollouts)
    if "model" in only:
        results.update(measure_models(args))
    return results


def parse_only(text: str | None, data_path: str | None) -> set[str]:
    """--only's settings (by default all but `model`; the official games only with --data-path), or a clear error."""
    only = set(SETTINGS[:-1] if text is None else (name.strip() for name in text.split(",")))
    unknown = only - set(SETTINGS)
    if unknown:
        raise SystemExit(f"--only: unknown setting(s) {sorted(unknown)}; choose among {', '.join(SETTINGS)}")
    if data_path is None:
        if text is not None and "official" in only:
            raise SystemExit("--only official needs --data-path (ALFWorld's json_2.1.1 folder)")
        only.discard("official")
    return only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=24, help="evaluation games per setting")
    parser.add_argument("--rollouts", type=int, default=4, help="random-policy episodes per game")
    parser.add_argument("--max-turns", type=int, default=50, help="turn limit (ALFWorld's evaluations use 50)")
    parser.add_argument("--draws", type=int, default=120, help="generator draws checked per split")
    parser.add_argument("--data-path", default=None, help="ALFWorld's json_2.1.1 folder, to also measure official games")
    parser.add_argument("--only", default=None, help=f"comma-separated settings to measure ({', '.join(SETTINGS)}): "
                        "their keys in --out are replaced, the others kept, each marked with this run's command")
    parser.add_argument("--model", default="smollm2-135m", help="the model of the `model` setting (served here)")
    parser.add_argument("--model-backends", default="alfworld,twc", help="`model`: alfworld, twc or both")
    parser.add_argument("--model-games", type=int, default=24, help="`model`: eval games per backend")
    parser.add_argument("--model-rollouts", type=int, default=2, help="`model`: sampled episodes per game")
    parser.add_argument("--model-max-turns", type=int, default=20, help="`model`: turn limit")
    parser.add_argument("--model-max-tokens", type=int, default=48, help="`model`: tokens per reply")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "alfworld_env.json")
    args = parser.parse_args()
    only = parse_only(args.only, args.data_path)
    if not set(args.model_backends.split(",")) <= {"alfworld", "twc"}:
        raise SystemExit(f"--model-backends {args.model_backends!r}: give alfworld, twc or alfworld,twc")

    command = (f"benchmarks/alfworld_env.py --games {args.games} --rollouts {args.rollouts} "
               f"--max-turns {args.max_turns} --draws {args.draws}"
               + (" --data-path <json_2.1.1>" if args.data_path else "")
               + (f" --only {','.join(s for s in SETTINGS if s in only)}" if args.only else "")
               + (f" --model {args.model} --model-backends {args.model_backends} --model-games {args.model_games} --model-rollouts {args.model_rollouts} "
                  f"--model-max-turns {args.model_max_turns} --model-max-tokens {args.model_max_tokens}"
                  if "model" in only else ""))  # fmt: skip
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    results = measure_settings(args, only)
    if args.only is None:
        report = {"benchmark": "alfworld_env", "command": command,
                  "machine": {**machine, "load_average_at_end": os.getloadavg()},
                  "date": time.strftime("%Y-%m-%d"), "results": results}  # fmt: skip
    else:  # a partial run: its settings say which command and day measured them; the rest of the file is kept
        report = json.loads(args.out.read_text()) if args.out.exists() else {"benchmark": "alfworld_env", "results": {}}
        stamp = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "load_average_at_end": os.getloadavg()}  # fmt: skip
        report["results"].update({key: {**value, "measured_by": stamp} for key, value in results.items()})
    atomic_write_json(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
