"""A verifiers v1 environment as rlvr's trainer sees one (`rlvr train --env v1:<taskset-id>`).

`V1Environment` has the few parts of a verifiers 0.1.9 Environment that rlvr's trainer reads (its training rows,
its sequence limit) and produces `Rollout` records itself (`rollouts`), through the bridge's worker
(rlvr.v1.bridge), instead of the 0.1.9 `generate`. The environment's episodes run with verifiers 0.4's own code
in the bridge's interpreter, against rlvr's server.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.rollouts import Rollout
from rlvr.v1.bridge import MARGIN_S, RENDERER, V1Error, Worker, check_generate
from rlvr.v1.convert import V1TraceError, failed_rollout, to_rollout

logger = logging.getLogger(__name__)

PREFIX = "v1:"
RLVR_KEY = "rlvr"  # the env-args table of the bridge's own settings (the rest is the v1 [env] config)
EPISODE_TIMEOUT_S = 600.0


def is_v1(name: str) -> bool:
    return name.startswith(PREFIX)


def episode_seed(seed: int, batch: int, example_id: int, rollout: int) -> int:
    """A per-episode sampling seed, a pure function of the run seed and the episode's place, like rlvr.seeding's
    per-request seeds; each model call of the episode samples with it mixed with the call's prompt length
    (rlvr.v1.worker.call_seed), so turns do not repeat one another's random draws."""
    digest = hashlib.sha256(f"v1/{seed}/{batch}/{example_id}/{rollout}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def sampling(sampling_args: Mapping[str, Any]) -> dict:
    """rlvr's sampling arguments (OpenAI request fields) as verifiers' SamplingConfig fields; token ids and
    logprobs need no flag: verifiers' train client always asks vLLM for them."""
    extra = dict(sampling_args.get("extra_body") or {})
    out = {k: v for k, v in {**extra, **sampling_args}.items()
           if k in ("temperature", "top_p", "top_k", "min_p", "max_tokens", "max_completion_tokens",
                    "repetition_penalty", "stop")}
    return out


class V1Environment:
    """A verifiers v1 environment, loaded in the bridge's interpreter. `env_args`: the v1 `[env]` config (e.g.
    `{"taskset": {"num_tasks": 8}}`), plus rlvr's own `{"rlvr": {"episode_timeout": seconds, "deadline_margin":
    seconds}}` (the margin added to a batch's deadline before its worker is killed; default 30)."""

    def __init__(self, name: str, env_args: Mapping[str, Any] | None = None):
        taskset_id = name.removeprefix(PREFIX)
        if not taskset_id:
            raise V1Error("`v1:` names no environment: give --env v1:<taskset-id>, e.g. v1:v1-calculator")
        args = copy.deepcopy(dict(env_args or {}))
        settings = args.pop(RLVR_KEY, {}) or {}
        unknown = set(settings) - {"episode_timeout", "deadline_margin"}
        if unknown:
            raise V1Error(f"unknown rlvr setting(s) {sorted(unknown)} in --env-args' 'rlvr' table: the only ones are "
                          "episode_timeout and deadline_margin (seconds)")
        self.episode_timeout = float(settings.get("episode_timeout", EPISODE_TIMEOUT_S))
        self.deadline_margin = float(settings.get("deadline_margin", MARGIN_S))
        taskset = dict(args.get("taskset") or {})
        taskset["id"] = taskset_id
        args["taskset"] = taskset
        self.config = args
        self.env_id = name
        self.max_seq_len: int | None = None
        self.turn_rewards = True  # turn rewards come with the traces: a turn-level estimator checks each batch
        self._worker: Worker | None = None
        self._tasks: list[dict] | None = None
        self._checked: str | None = None  # the server URL check_generate passed

    # ---------------------------------------------------------------- what the trainer reads
    def set_max_seq_len(self, n: int) -> None:
        """Every agent of the episode stops at n tokens in all (verifiers' `max_total_tokens`)."""
        self.max_seq_len = n

    def worker(self) -> Worker:
        if self._worker is None or not self._worker.alive():
            config = copy.deepcopy(self.config)
            if self.max_seq_len is not None:
                agent = config.setdefault("agent", {})
                agent.setdefault("max_total_tokens", self.max_seq_len)
            self._worker = Worker(config)
            if self._tasks is not None and len(self._worker.tasks) != len(self._tasks):
                raise V1Error(f"{self.env_id} loaded {len(self._worker.tasks)} tasks in a new worker where it had "
                              f"{len(self._tasks)}: its taskset is not deterministic")
            self._tasks = self._worker.tasks
        return self._worker

    def tasks(self) -> list[dict]:
        if self._tasks is None:
            self.worker()
        return self._tasks

    def get_dataset(self, n: int = -1, seed: int | None = None):
        """The taskset as rlvr's training rows: prompt (messages), example_id (the task's position), task, answer."""
        from datasets import Dataset

        rows = [{"prompt": t["prompt"], "example_id": int(t["idx"]), "task": self.env_id,
                 "answer": str(t["data"].get("answer", ""))} for t in self.tasks()]
        dataset = Dataset.from_list(rows)
        if seed is not None:
            dataset = dataset.shuffle(seed=seed)
        return dataset.select(range(min(n, len(dataset)))) if n is not None and n >= 0 else dataset

    get_eval_dataset = get_dataset

    # ---------------------------------------------------------------- rollouts
    def rollouts(self, rows: Sequence[Mapping[str, Any]], rollouts_per_example: int, *, url: str, model: str,
                 model_path: str, sampling_args: Mapping[str, Any], max_concurrent: int, seed: int | None,
                 batch: int = 0) -> list[Rollout]:
        """`rollouts_per_example` episodes of each row, as rollouts in row order. A failed episode is a rollout
        with its error and outcome 0; a batch whose every episode failed the same way raises V1Error."""
        if self._checked != url:
            check_generate(url, model)
            self._checked = url
        worker = self.worker()
        episodes, places = [], []
        for row in rows:
            for k in range(rollouts_per_example):
                example_id = int(row["example_id"])
                episodes.append({"slot": len(episodes), "task": example_id,
                                 "seed": None if seed is None else episode_seed(seed, batch, example_id, k)})
                places.append(row)
        endpoint = {"base_url": f"{url.rstrip('/').removesuffix('/v1')}/v1", "model": model,
                    "renderer_model": model_path, "renderer": RENDERER}
        results = worker.run(batch, episodes, endpoint=endpoint, sampling=sampling(sampling_args),
                             timeout=self.episode_timeout, max_concurrent=max_concurrent,
                             margin=self.deadline_margin)
        rollouts = []
        for episode, row in zip(episodes, places, strict=True):
            result = results[episode["slot"]]
            where = dict(example_id=int(row["example_id"]), task=self.env_id, prompt=list(row["prompt"]),
                         answer=row.get("answer", ""))
            traces = [t for t in result.get("traces") or [] if (t.get("agent") or {}).get("trainable", True)]
            if not traces:
                rollouts.append(failed_rollout(**where, error=result.get("error") or "the episode left no trace"))
            try:
                rollouts += [to_rollout(t, **where, error=result.get("error")) for t in traces]
            except V1TraceError as err:
                raise V1Error(f"{self.env_id}, task {where['example_id']}: {err}") from err
        self.check_failures(rollouts, batch)
        return rollouts

    def evaluate(self, rows, rollouts_per_example: int, *, url: str, model: str, sampling_args: Mapping[str, Any],
                 max_concurrent: int, seed: int | None) -> dict:
        """`rlvr evaluate`'s rollouts, as verifiers 0.1.9's GenerateOutputs (what rlvr.evaluation saves and
        summarises): states that rlvr.rollouts.from_state reads back into the same rollouts."""
        import time
        from datetime import datetime

        from rlvr import models

        start = time.perf_counter()
        rollouts = self.rollouts(list(rows), rollouts_per_example, url=url, model=model,
                                 model_path=models.resolve(model), sampling_args=sampling_args,
                                 max_concurrent=max_concurrent, seed=seed)
        states = [generate_state(r) for r in rollouts]
        names = sorted({name for r in rollouts for name in r.metrics})
        rewards = [r.outcome for r in rollouts]
        return {
            "prompt": [r.prompt for r in rollouts], "completion": [r.completion for r in rollouts],
            "answer": [r.answer for r in rollouts], "task": [r.task for r in rollouts],
            "info": [{} for _ in rollouts], "example_id": [r.example_id for r in rollouts], "reward": rewards,
            "metrics": {name: [r.metrics.get(name, 0.0) for r in rollouts] for name in names}, "state": states,
            "metadata": {"env_id": self.env_id, "env_args": self.config, "model": model, "base_url": url,
                         "num_examples": len(rows), "rollouts_per_example": rollouts_per_example,
                         "sampling_args": dict(sampling_args), "date": datetime.now().isoformat(),
                         "time_ms": (time.perf_counter() - start) * 1000,
                         "avg_reward": sum(rewards) / max(len(rewards), 1),
                         "avg_metrics": {n: sum(r.metrics.get(n, 0.0) for r in rollouts) / len(rollouts)
                                         for n in names},
                         "state_columns": [], "path_to_save": None},
        }

    def check_failures(self, rollouts: Sequence[Rollout], batch: int) -> None:
        failed = [r.error for r in rollouts if r.error]
        if failed and len(failed) == len(rollouts) and len(set(failed)) == 1:
            raise V1Error(f"every episode of batch {batch} of {self.env_id} failed: {failed[0]}")
        for error in sorted(set(failed)):
            logger.warning(f"{self.env_id}: {failed.count(error)} of {len(rollouts)} episodes of batch {batch} "
                           f"failed (scored as failures): {error}")

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def generate_state(rollout: Rollout) -> dict:
    """A rollout as a verifiers 0.1.9 state, the inverse of rlvr.rollouts.from_state (turn rewards on each step's
    extras, token ids on its tokens), for the code that saves evaluations."""
    steps = []
    for turn in rollout.turns:
        tokens = turn.tokens
        step = {"reward": turn.reward, "response": None, "extras": {"tool_result": turn.tool_result}, "tokens": None
                if tokens is None else {"prompt_ids": list(tokens.prompt_ids),
                                        "completion_ids": list(tokens.completion_ids),
                                        "completion_mask": list(tokens.completion_mask),
                                        "completion_logprobs": list(tokens.completion_logprobs)}}
        if turn.reward is not None:
            step["extras"]["turn_rewards"] = dict(turn.reward_parts)
        steps.append(step)
    return {"example_id": rollout.example_id, "task": rollout.task, "prompt": rollout.prompt,
            "completion": rollout.completion, "answer": rollout.answer, "reward": rollout.outcome,
            "metrics": dict(rollout.metrics), "trajectory": steps, "is_truncated": rollout.truncated,
            "error": None if rollout.error is None else V1Error(rollout.error),
            "timing": {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0}}
