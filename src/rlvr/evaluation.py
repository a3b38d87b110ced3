"""Evaluate and predict: run an environment against an OpenAI-compatible endpoint and save what happened.

Results are written in vf-eval's layout (``results.jsonl`` + ``metadata.json``, through verifiers' own
``make_dataset``), plus the per-turn rewards that TurnRubric writes on each trajectory step, so that verifiers'
tools read our results and our analysis reads theirs. Writes are atomic: a directory appears complete or not at all.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlvr.io import atomic_directory
from rlvr.rollouts import Rollout, from_state, rollout_statistics
from rlvr.seeding import ClientView, number_rollouts, seeded_rollouts

if TYPE_CHECKING:
    from rlvr.serve.launch import KeptServer

TURN_REWARDS = "turn_rewards"


class EnvironmentLoadError(RuntimeError):
    """An environment that cannot be loaded, with the installed ones listed."""


def installed_environment_names() -> list[str]:
    """Distributions whose top-level module exposes ``load_environment`` (what ``vf.load_environment`` finds)."""
    from rlvr.hub import installed_environments

    return sorted(env.name for env in installed_environments())


def server_flags(*envs: Any, given: Sequence[str] = ()) -> list[str]:
    """The `rlvr serve` flags (passed through to vLLM) for a server started for these environments' rollouts: the
    `given` ones, then those the environments need that `given` lacks (a verifiers v1 environment samples through
    vLLM's token route, `rlvr.v1.bridge.SERVE_FLAGS`). `envs`: loaded environments or their names."""
    names = [env if isinstance(env, str) else getattr(env, "env_id", None) or "" for env in envs]
    needed: tuple[str, ...] = ()
    if any(name.startswith("v1:") for name in names):
        from rlvr.v1.bridge import SERVE_FLAGS

        needed = SERVE_FLAGS
    return [*given, *(flag for flag in needed if flag not in given)]


def load_env(name: str, env_args: dict[str, Any] | None = None):
    """``vf.load_environment`` with errors that say what to fix: unknown ids list the installed environments,
    misspelt arguments get the closest valid name, failures inside ``load_environment`` show their own message."""
    import difflib
    import importlib
    import importlib.util
    import inspect

    import verifiers as vf

    env_args = env_args or {}
    if name.startswith("v1:"):  # a verifiers v1 environment, run by the bridge's interpreter (rlvr.v1, docs/v1.md)
        from rlvr.v1 import V1Environment

        return V1Environment(name, env_args)
    moved = sorted({"estimator", "estimator_params", "algo"} & set(env_args))
    if moved:
        raise EnvironmentLoadError(
            f"{moved} in the environment arguments of {name}: environments carry environment settings only. Choose "
            "the algorithm with `rlvr train --algo` and its parameters with `--set credit.NAME=VALUE` (TOML: "
            "[training.credit])"
        )
    module_name = name.replace("-", "_").split("/")[-1]
    if importlib.util.find_spec(module_name) is None:
        installed = ", ".join(installed_environment_names()) or "none"
        raise EnvironmentLoadError(
            f"unknown environment {name!r}. Installed environments: {installed}.\n"
            f"  fix: `rlvr env install {name}`, or `pip install -e environments/{module_name}` in this repository"
        )
    loader = getattr(importlib.import_module(module_name), "load_environment", None)
    if loader is None:
        raise EnvironmentLoadError(f"module {module_name!r} has no load_environment(): is {name!r} an environment?")
    parameters = inspect.signature(loader).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        for key in env_args:
            if key not in parameters:
                close = difflib.get_close_matches(key, parameters, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else f" Valid: {', '.join(parameters)}."
                raise EnvironmentLoadError(f"{name} has no argument {key!r}.{hint}")
    try:
        return vf.load_environment(name, **env_args)
    except (ValueError, RuntimeError) as err:
        cause = err.__cause__ or err
        raise EnvironmentLoadError(f"{name} failed to load with {env_args}: {cause}") from err


@dataclass(frozen=True)
class Stat:
    mean: float
    stderr: float  # standard error of the mean: sample std / sqrt(n)
    n: int


def mean_stderr(values: Sequence[float]) -> Stat:
    values = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not values:
        return Stat(float("nan"), float("nan"), 0)
    arr = np.asarray(values, dtype=float)
    stderr = float(arr.std(ddof=1) / math.sqrt(len(arr))) if len(arr) > 1 else 0.0
    return Stat(float(arr.mean()), stderr, len(arr))


def summarize(rollouts: Sequence[Rollout]) -> dict[str, Stat]:
    """Mean and standard error of every statistic of `rlvr.rollouts.rollout_statistics` (the names training logs
    use: reward, each reward function, turn/<k>/reward counted from 1 over the rollouts that reached turn k, ...)."""
    return {name: mean_stderr(values) for name, values in rollout_statistics(rollouts).items()}


def rollouts_of(results: dict) -> list[Rollout]:
    """verifiers' GenerateOutputs as rlvr's records."""
    return [from_state(s) for s in results["state"]]


def read_summary(eval_dir: Path) -> dict[str, Stat]:
    """An evaluation's summary.json (written by `save_results`) back as statistics."""
    return {k: Stat(**v) for k, v in json.loads((eval_dir / "summary.json").read_text()).items()}


def summary_table(summary: dict[str, Stat], title: str):
    from rich.table import Table

    table = Table(title=title)
    for column, justify in (("metric", "left"), ("mean", "right"), ("stderr", "right"), ("n", "right")):
        table.add_column(column, justify=justify)
    for name, stat in summary.items():
        table.add_row(name, f"{stat.mean:.4f}", f"{stat.stderr:.4f}", str(stat.n))
    return table


def save_results(results: dict, out_dir: Path) -> Path:
    """Write vf-eval's ``results.jsonl`` + ``metadata.json`` (plus per-turn columns and a summary) atomically."""
    from verifiers.utils.eval_utils import make_dataset, quiet_datasets, sanitize_metadata

    dataset = make_dataset(results)
    rollouts = rollouts_of(results)
    dataset = dataset.add_column(TURN_REWARDS, [r.turn_rewards if r.turn_level else [] for r in rollouts])
    metadata = sanitize_metadata(results["metadata"])
    summary = summarize(rollouts)
    with atomic_directory(out_dir) as tmp:
        with quiet_datasets():
            dataset.to_json(tmp / "results.jsonl")
        (tmp / "metadata.json").write_text(json.dumps(metadata, indent=2, default=str))
        (tmp / "summary.json").write_text(json.dumps({k: vars(v) for k, v in summary.items()}, indent=2))
    return out_dir


def openai_client(base_url: str, timeout: float = 600.0):
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"), timeout=timeout)


def check_endpoint(base_url: str, timeout: float = 5.0) -> None:
    """Fail early and clearly when nothing answers at the endpoint."""
    import httpx

    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=timeout).raise_for_status()
    except httpx.HTTPError as err:
        raise ConnectionError(
            f"no OpenAI-compatible server answers at {base_url} ({err.__class__.__name__}: {err}).\n"
            "  fix: start one with `rlvr serve --model MODEL` (default port 8000) or pass --model to start one here"
        ) from err


class ServerLost(RuntimeError):
    """The evaluation's server died or failed its requests and was not brought back: nothing was written."""


def server_failures():
    """The errors of a model call that failed for the server's sake rather than the request's: no connection
    (refused, reset, timed out: openai.APIConnectionError, of which APITimeoutError is one) or a 5xx answer
    (openai.InternalServerError is any status >= 500)."""
    import openai

    return (openai.APIConnectionError, openai.InternalServerError)


def server_failure(error: BaseException | None) -> BaseException | None:
    """The server failure (`server_failures`) in an error's chain of causes (verifiers wraps a failed model call in a
    vf.ModelError raised from it), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, server_failures()):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class ServerRecovery:
    """What an evaluation does when a model call fails for the server's sake (`server_failures`), as training does
    (rlvr.trainer.faults): a server that still answers /health means the failure was the request's own, so the call
    fails (its rollout records the error). A dead or silent server that this process started (`server`, a
    `rlvr.serve.launch.KeptServer`) is restarted on its port (bounded, logged), `after_restart(url)` gives it back
    what it served (a trained model's weights), and the call is sent again with the same arguments, its seed
    included: it samples what the dead server would have. Calls failing meanwhile wait for that one restart.

    When the server cannot be brought back (the user's, or restarts spent), `lost` says why in one line and every
    later failing call fails at once; `run_rollouts` then raises ServerLost instead of returning results."""

    def __init__(self, url: str, server: KeptServer | None = None,
                 after_restart: Callable[[str], object] | None = None, health_timeout: float = 10.0):
        self.url = url.rstrip("/").removesuffix("/v1")
        self.server, self.after_restart, self.health_timeout = server, after_restart, health_timeout
        self.lost: str | None = None
        self.generation = 0  # restarts so far: a call that failed before the latest one just tries again
        self._lock: asyncio.Lock | None = None

    async def call(self, send: Callable[[], Awaitable[Any]]) -> Any:
        while True:
            generation = self.generation
            try:
                return await send()
            except server_failures() as err:
                if not await self.recovered(generation, err):
                    raise

    async def recovered(self, generation: int, err: BaseException) -> bool:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self.lost is not None:
                return False
            if generation != self.generation:
                return True
            from rlvr.serve.launch import server_problem

            started = self.server.server if self.server is not None else None
            problem = await asyncio.to_thread(server_problem, self.url, started, self.health_timeout)
            if problem is None:
                return False
            if self.server is not None and await asyncio.to_thread(self.server.restart, problem):
                if self.after_restart is not None:
                    await asyncio.to_thread(self.after_restart, self.server.url)
                self.generation += 1
                return True
            self.lost = self.lost_message(problem, err)
            return False

    def lost_message(self, problem: str, err: BaseException) -> str:
        if self.server is None:
            fix = "restart it, then run the same command again"
        else:
            spent = f", after {self.server.restarts} restart(s)" if self.server.restarts else ""
            problem = f"{problem}{spent}"
            fix = f"its log: {self.server.log_file}"
        return (f"the rollout server {self.url} {problem} ({type(err).__name__}): the evaluation stopped and wrote "
                f"no results; {fix}")

    def check(self, results: dict) -> None:
        """Raise ServerLost when the server was lost or any rollout failed for the server's sake: a summary is
        never written over them."""
        failures = [f for state in results["state"] if (f := server_failure(state.get("error"))) is not None]
        if self.lost is not None:
            raise ServerLost(f"{self.lost} ({len(failures)} of {len(results['state'])} rollouts failed)")
        if failures:
            first = failures[0]
            raise ServerLost(
                f"{len(failures)} of {len(results['state'])} rollouts failed for the server's sake although the "
                f"server at {self.url} answers /health (first: {type(first).__name__}: {first}): the evaluation "
                "wrote no results; run it again")


class RecoveringClient(ClientView):
    """An AsyncOpenAI client whose completion calls go through `ServerRecovery.call`."""

    def __init__(self, client, recovery: ServerRecovery):
        def recovering(endpoint):
            async def create(**kwargs):
                return await recovery.call(lambda: endpoint.create(**kwargs))

            return create

        super().__init__(client, recovering(client.chat.completions), recovering(client.completions))


def run_rollouts(
    env,
    *,
    base_url: str,
    model: str,
    num_examples: int,
    rollouts_per_example: int,
    sampling_args: dict | None = None,
    split: str = "eval",
    max_concurrent: int = 8,
    seed: int | None = None,
    client=None,
    sampling_seed: int | None = 0,
    server: KeptServer | None = None,
    after_restart: Callable[[str], object] | None = None,
) -> dict:
    """Generate and score rollouts of ``env``'s eval (or train) split. Returns verifiers' GenerateOutputs.
    `client`: what answers the model calls (default: an OpenAI client of ``base_url``; e.g. a search policy).
    `seed`: shuffles the split before the first ``num_examples`` are taken (None: no shuffle). `sampling_seed`: every
    request is sampled with a seed derived from it, the example and the rollout (`rlvr.seeding`, stream "eval"), so
    the same weights give the same rollouts; None: the server's unseeded sampling.

    A server that dies on the way is restarted when this process started it (`server`, then `after_restart(url)`)
    and the failed calls sent again (`ServerRecovery`); otherwise, or when any rollout failed for the server's sake,
    ServerLost is raised in one line and nothing is returned."""
    check_endpoint(base_url)
    if split not in {"eval", "train"}:
        raise ValueError(f"--split must be 'eval' or 'train', got {split!r}")
    dataset = env.get_eval_dataset(n=num_examples, seed=seed) if split == "eval" else env.get_dataset(num_examples, seed)
    from rlvr.v1 import V1Environment

    if isinstance(env, V1Environment):  # a verifiers v1 environment: its episodes run in the bridge (rlvr.v1)
        return env.evaluate(dataset, rollouts_per_example, url=base_url, model=model, sampling_args=sampling_args or {},
                            max_concurrent=max_concurrent, seed=sampling_seed)
    if rollouts_per_example > 1:
        dataset = dataset.repeat(rollouts_per_example)
    recovery = ServerRecovery(base_url, server, after_restart)
    start = time.perf_counter()
    with seeded_rollouts(env, sampling_seed, "eval"):
        results = asyncio.run(
            env.generate(
                number_rollouts(dataset.to_list()),
                client=client or RecoveringClient(openai_client(base_url), recovery),
                model=model,
                sampling_args=sampling_args or {},
                max_concurrent=max_concurrent,
                use_tqdm=True,
            )
        )
    recovery.check(results)
    results["metadata"]["time_ms"] = (time.perf_counter() - start) * 1000
    results["metadata"]["num_examples"] = num_examples
    results["metadata"]["rollouts_per_example"] = rollouts_per_example
    results["metadata"]["sampling_seed"] = sampling_seed
    return results


def prediction_records(results: dict) -> list[dict]:
    """One JSON-ready record per rollout: prompt, completion, turns, per-turn and outcome rewards, metrics."""
    from verifiers.utils.message_utils import messages_to_printable, sanitize_tool_calls

    records = []
    for i, rollout in enumerate(rollouts_of(results)):
        records.append(
            {
                "example_id": rollout.example_id,
                "prompt": sanitize_tool_calls(messages_to_printable(rollout.prompt)),
                "completion": sanitize_tool_calls(messages_to_printable(rollout.completion)),
                "answer": rollout.answer,
                "num_turns": len(rollout.turns),
                TURN_REWARDS: rollout.turn_rewards if rollout.turn_level else [],
                "reward": rollout.outcome,
                "metrics": dict(rollout.metrics),
                "stop_condition": results["stop_conditions"][i],
                "error": rollout.error,
            }
        )
    return records


def save_predictions(records: list[dict], out_dir: Path) -> Path:
    """``predictions.jsonl`` and a Hugging Face dataset (``dataset/``), atomically."""
    from datasets import Dataset

    # message lists vary in shape between rollouts: store them as JSON strings in the Arrow dataset
    flat = [{**r, **{k: json.dumps(r[k], default=str) for k in ("prompt", "completion", "metrics")}} for r in records]
    with atomic_directory(out_dir) as tmp:
        with open(tmp / "predictions.jsonl", "w") as f:
            for record in records:
                f.write(json.dumps(record, default=str) + "\n")
        Dataset.from_list(flat).save_to_disk(str(tmp / "dataset"))
    return out_dir
