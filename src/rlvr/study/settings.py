"""A study's settings: the grid (algorithms x seeds), the one budget every cell trains under, the held-out
evaluation, and how the report compares the cells. Read from a TOML file (configs/study/*.toml), with overrides
on top, and checked before anything slow starts.

TOML layout (every table optional except what a run needs: env, model, algos, seeds, training.max_steps):

    env = "vf-triviaqa-search"
    model = "smollm2-135m"
    algos = ["grpo", "mt_grpo"]          # names of `rlvr train --list`, or estimators of your own by import path
    seeds = [0, 1, 2]
    replicates = 1                       # runs of each cell with the same seed (2+: the report measures re-run spread)
    server_dtype = "float32"             # the weights' dtype in the rollout server (the trainer's: fp32 on CPU)
    server_args = ["--kv-cache-gb", "1"] # passed to `rlvr serve` (operational: may change between invocations)
    keep_checkpoints = false             # delete a finished cell's checkpoint-N/ (final/ stays)
    results = "benchmarks/results/NAME"  # committed records of finished units: a fresh clone runs only the others
                                         # (rlvr.study.records; operational: not part of the budget)
    [env_args]                           # load_environment arguments, the same for every cell
    [train_env_args]                     # changes to env_args for the training rollouts only (e.g. goals from
                                         # another catalogue seed); every held-out evaluation keeps env_args
    [training]                           # configuration fields shared by every cell: the budget
    [algo_options.mt_grpo]               # fields for one algorithm only, e.g. its [algo_options.mt_grpo.credit]
    [variants]                           # NAME = "ALGO": a cell name for a registered algorithm with its own
                                         # [algo_options.NAME], e.g. ppo_bi_level = "ppo" beside "ppo" itself
    [offline_datasets]                   # offline recipes (sft, oreo): ALGO = "trajectory directory" (rlvr collect)
    [evaluation]                         # examples, rollouts, temperature, max_tokens (held-out, before and after);
                                         # max_concurrent (requests in flight: speed, may change between invocations);
                                         # at_steps = [4, 8]: also evaluate each cell's weights of those steps (the
                                         # held-out learning curve)
    [evaluation.sets]                    # more held-out sets: NAME = {env_args changes}, e.g. valid_seen = {...}
    [report]                             # baseline, headline, collapse_window, collapse_tol, confidence,
                                         # target (training metric -> value: steps to reach it), split_by (a field
                                         # of the held-out rows: the per-example pairings per value of it)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config_files import check_keys, did_you_mean, read_toml


class StudyError(ValueError):
    """Study settings or a study directory that cannot be used, with what to change."""


def config_fields(algo: str) -> set[str]:
    """The configuration fields of `algo` (rlvr.trainer.ALGORITHMS)."""
    from rlvr.trainer.recipes import config_class

    return {f.name for f in dataclasses.fields(config_class(algo)) if f.init}


def is_offline(algo: str) -> bool:
    """An offline recipe (sft, oreo) trains on a trajectory dataset instead of its own rollouts."""
    from rlvr.trainer.recipes import config_class

    return bool(getattr(config_class(algo), "offline", False))


def recipe_of(variants: dict[str, str], name: str) -> str:
    """The registered algorithm a grid name runs: the algorithm of its [variants] entry, else the name itself."""
    return variants.get(name, name)


# A variant's name is a directory name (cells/NAME/seed-S) and a report column.
VARIANT_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

# Training fields the study sets per cell, and the defaults it gives a cell unless [training] says otherwise.
CELL_FIELDS = ("output_dir", "seed")
TRAINING_DEFAULTS: dict[str, Any] = {  # (each where the algorithm's configuration has the field)
    "use_lora": False,  # RLConfig's default is LoRA; a LoRA cell's final/ (an adapter) is served merged
    "report_to": "none",
    "logging_steps": 1,  # the curves and the collapse check read every step
    "save_total_limit": 1,  # an interrupted cell resumes from its newest checkpoint; older ones are dead weight
}

# The shared options an offline recipe (sft, oreo) takes: optimizer steps x trajectories per step, and run mechanics.
OFFLINE_SHARED = ("max_steps", "batch_size", "micro_batch_size", "save_steps", "bf16")


@dataclass
class EvaluationSettings:
    """The held-out evaluation run before training (once per seed) and after it (every cell)."""

    examples: int = 100  # the first `examples` rows of the environment's eval split: the same for every cell
    rollouts: int = 2  # sampled rollouts per example
    temperature: float | None = None  # None: the training temperature
    max_tokens: int | None = None  # per assistant turn; None: the training max_tokens_per_turn
    # other held-out sets, each evaluated after the main one on the same weights: NAME -> load_environment
    # arguments changed from env_args (e.g. valid_seen = {eval_split = "valid_seen"}, twc = {backend = "twc"})
    sets: dict[str, dict[str, Any]] = field(default_factory=dict)
    # requests in flight (training sends a whole batch at once): speed only, so not part of a study's budget; with
    # seeded sampling the rollouts are the same up to the server's batch numerics
    max_concurrent: int = 8
    # training steps whose weights every cell also evaluates (main held-out set, same examples, sampling and seeds):
    # with the base model (step 0) and the final weights, the held-out learning curve
    at_steps: list[int] = field(default_factory=list)

    def check(self) -> None:
        if self.examples < 1 or self.rollouts < 1 or self.max_concurrent < 1:
            raise StudyError(f"[evaluation] examples={self.examples}, rollouts={self.rollouts}, max_concurrent="
                             f"{self.max_concurrent}: each must be >= 1")
        for name, changes in self.sets.items():
            if not VARIANT_NAME.fullmatch(name) or not isinstance(changes, dict) or not changes:
                raise StudyError(f"[evaluation.sets] {name} = {changes!r}: a held-out set is a name (letters, digits, "
                                 "_ - .) and a table of the load_environment arguments it changes, e.g. "
                                 "valid_seen = { eval_split = \"valid_seen\" }")

    def check_at_steps(self, training: dict[str, dict[str, Any]]) -> None:
        """at_steps (`training`: algo -> its cells' training options): increasing steps strictly between 0 and every
        algorithm's max_steps (step 0 is the base evaluation, max_steps the final one), each a multiple of its
        num_iterations: a curve point is saved as a checkpoint, and one between two passes over a batch could not
        be resumed."""
        steps = self.at_steps
        if not isinstance(steps, list) or any(not isinstance(s, int) or isinstance(s, bool) for s in steps):
            raise StudyError(f"[evaluation] at_steps = {steps!r}: give a list of training steps (integers), e.g. "
                             "at_steps = [4, 8]")
        for algo, options in training.items():
            max_steps, every = options["max_steps"], options.get("num_iterations", 1)
            example = f"e.g. at_steps = {sorted({max(1, max_steps // 3), max(1, 2 * max_steps // 3)})}"
            if any(not 0 < s < max_steps for s in steps) or steps != sorted(set(steps)):
                raise StudyError(f"[evaluation] at_steps = {steps}: give distinct steps in increasing order, each "
                                 f"between 1 and max_steps - 1 = {max_steps - 1} ({algo}'s max_steps is {max_steps}: "
                                 f"step 0 is the base model's evaluation, step {max_steps} the final one), {example} "
                                 "(or --at-steps with --steps; '' for none)")
            if off := [s for s in steps if s % every]:
                raise StudyError(f"[evaluation] at_steps {off} are not multiples of {algo}'s num_iterations = "
                                 f"{every}: a curve point is a checkpoint, and one between two passes over a batch "
                                 "cannot be resumed; choose multiples of it")

    def env_args(self, name: str, env_args: dict[str, Any]) -> dict[str, Any]:
        """The load_environment arguments of held-out set `name`: the study's, with the set's changes."""
        return {**env_args, **self.sets[name]}


@dataclass
class ReportSettings:
    baseline: str | None = None  # the algorithm the others are compared with; None: the first of `algos`
    headline: list[str] = field(default_factory=lambda: ["reward"])  # metrics of the per-cell table
    collapse_window: int = 3  # steps: see rlvr.study.stats.detect_collapse
    collapse_tol: float = 1e-6
    confidence: float = 0.95  # level of the paired t intervals
    # training metric -> value: the first step whose training batch reached it, per cell (e.g. {outcome = 0.9}:
    # 90% of an optimum of 1.0, the credit suite's "updates to reach 90%")
    target: dict[str, float] = field(default_factory=dict)
    # a field of each held-out example (a key of its results.jsonl rows, or of their `info`), e.g. vf-webshop's
    # target_in_training: the per-example pairings are also given for each value of it (None: not split)
    split_by: str | None = None

    def check(self) -> None:
        if self.collapse_window < 1:
            raise StudyError(f"[report] collapse_window={self.collapse_window} must be >= 1 steps")
        for metric, value in self.target.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise StudyError(f"[report] target {metric} = {value!r}: give the value a training metric must reach, "
                                 "e.g. target = {outcome = 0.9}")
        if not 0 < self.confidence < 1:
            raise StudyError(f"[report] confidence={self.confidence} must be in (0, 1), e.g. 0.95")
        if self.split_by is not None and (not isinstance(self.split_by, str) or not self.split_by.strip()):
            raise StudyError(f"[report] split_by = {self.split_by!r}: name a field of the held-out rows (a key of "
                             "results.jsonl rows or of their info), e.g. split_by = \"target_in_training\"")


@dataclass
class StudySettings:
    env: str
    model: str
    algos: list[str]
    seeds: list[int]
    env_args: dict[str, Any] = field(default_factory=dict)
    # load_environment arguments changed for training only: the cells train on one set of tasks and are evaluated
    # on env_args' held-out set (e.g. WebShop goals from a fresh catalogue, evaluated on the SFT's held-out goals)
    train_env_args: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    algo_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    offline_datasets: dict[str, str] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)  # grid name -> the registered algorithm it runs
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    server_dtype: str | None = "float32"
    server_args: list[str] = field(default_factory=list)
    keep_checkpoints: bool = False
    replicates: int = 1  # same-seed runs of every cell: the first is the cell, the others measure re-run spread
    results: str | None = None  # directory of committed per-unit records (rlvr.study.records)

    def __post_init__(self):
        from rlvr.trainer.recipes import ALGORITHMS, algorithm

        def registered(name: str) -> bool:  # or an estimator of your own by its import path
            try:
                algorithm(name)
            except KeyError:
                return False
            except ValueError as err:
                raise StudyError(f"algorithm {name!r}: {err}") from None
            return True

        if not isinstance(self.train_env_args, dict):
            raise StudyError(f"train_env_args = {self.train_env_args!r}: give a table of the load_environment "
                             "arguments that training changes, e.g. [train_env_args] seed = 1")
        if not self.algos:
            raise StudyError("algos is empty: name at least one algorithm (`rlvr train --list` shows them)")
        for name, algo in self.variants.items():
            if name in ALGORITHMS or not VARIANT_NAME.fullmatch(name):
                raise StudyError(f"[variants] {name} = {algo!r}: a variant needs a name of its own (letters, digits, "
                                 f"_ - .; not a registered algorithm's), e.g. {algo}_variant = {algo!r}")
            if not registered(algo):
                raise StudyError(f"[variants] {name} = {algo!r}: {algo!r} is not a registered algorithm "
                                 f"({', '.join(ALGORITHMS)})")
        known = [*ALGORITHMS, *self.variants]
        for algo in [*self.algos, *self.algo_options]:
            if algo not in self.variants and not registered(algo):
                raise StudyError(f"unknown algorithm {algo!r}." + (did_you_mean(algo, known) or
                                 f" Registered: {', '.join(ALGORITHMS)}.") + " A variant of a registered "
                                 "algorithm is named in [variants], e.g. ppo_bi_level = \"ppo\"; an estimator of "
                                 "your own by its import path, e.g. my_credit.estimators.mine.")
        if len(set(self.algos)) != len(self.algos):
            raise StudyError(f"algos {self.algos} names an algorithm twice")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise StudyError(f"seeds {self.seeds}: give one or more distinct integers, e.g. [0, 1, 2]")
        if any(not isinstance(s, int) or isinstance(s, bool) for s in self.seeds):
            raise StudyError(f"seeds {self.seeds}: each seed must be an integer")
        if not isinstance(self.replicates, int) or isinstance(self.replicates, bool) or self.replicates < 1:
            raise StudyError(f"replicates = {self.replicates!r}: give the number of runs of each cell with the same "
                             "seed, an integer >= 1 (1: no re-runs; 2 or more: the report states the re-run spread)")
        if self.report.baseline is None:
            self.report.baseline = self.algos[0]
        if self.report.baseline not in self.algos:
            raise StudyError(f"baseline {self.report.baseline!r} is not one of the study's algos {self.algos}: the "
                             "report compares every algorithm with it, so list it too (its finished cells are "
                             "skipped, e.g. --algos grpo,oreo to add oreo) or choose another [report] baseline")
        for where, options in (("[training]", self.training), *(
                (f"[algo_options.{a}]", o) for a, o in self.algo_options.items())):
            fixed = sorted(set(options) & set(CELL_FIELDS))
            if fixed:
                raise StudyError(f"{where} sets {fixed}: the study sets them per cell (seeds = the grid's seeds, "
                                 "output_dir = the cell's directory)")
        for algo in self.algos:
            if is_offline(self.recipe(algo)) and algo not in self.offline_datasets:
                raise StudyError(f"{algo} trains offline on collected trajectories, not on its own rollouts: set "
                                 f"[offline_datasets] {algo} = \"DIR\" (a directory made by `rlvr collect --env "
                                 f"{self.env} --model {self.model} ...`)")
        if not isinstance(self.training.get("max_steps"), int) or self.training["max_steps"] < 1:
            raise StudyError("[training] max_steps must be set (an integer >= 1): every cell trains that many steps")
        for algo in self.algos:
            if self.cell_training(algo).get("use_lora") and self.evaluation.at_steps:
                raise StudyError(f"{algo}: use_lora=true with [evaluation] at_steps: the learning curve keeps each "
                                 "step's full weights (model.safetensors), and a LoRA checkpoint holds its adapter "
                                 "only; drop at_steps or set use_lora = false")
        self.evaluation.check()
        self.evaluation.check_at_steps({algo: self.cell_training(algo) for algo in self.algos})
        self.report.check()

    def recipe(self, name: str) -> str:
        return recipe_of(self.variants, name)

    def cell_training(self, algo: str) -> dict[str, Any]:
        """The training options of every cell of `algo` (the study adds output_dir and seed). An offline recipe
        takes only OFFLINE_SHARED of the shared options: it generates no rollouts, and fields it shares by name
        with the on-policy configs mean other things there (OREO's `beta` is its KL strength, its learning rate
        the paper's); its own go in [algo_options.ALGO]."""
        recipe = self.recipe(algo)
        fields = config_fields(recipe)
        defaults = {k: v for k, v in TRAINING_DEFAULTS.items() if k in fields}
        shared = {k: v for k, v in self.training.items() if not is_offline(recipe) or k in OFFLINE_SHARED}
        return {**defaults, **shared, **self.algo_options.get(algo, {})}

    def training_env_args(self) -> dict[str, Any]:
        """The load_environment arguments of the environment the cells train on."""
        return {**self.env_args, **self.train_env_args}

    def sampling(self) -> dict[str, Any]:
        """Sampling of the held-out evaluations: the training sampling unless [evaluation] says otherwise."""
        training = self.training
        temperature = self.evaluation.temperature
        max_tokens = self.evaluation.max_tokens
        return {
            "temperature": temperature if temperature is not None else training.get("temperature", 1.0),
            "max_tokens": max_tokens if max_tokens is not None else training.get("max_tokens_per_turn", 256),
        }

    def budget(self) -> dict[str, Any]:
        """What every cell gets: the numbers that make the cells comparable."""
        t = self.training
        keys = ("max_steps", "batch_size", "rollouts_per_example", "max_tokens_per_turn", "max_seq_len",
                "learning_rate", "temperature", "num_iterations")
        return {k: t[k] for k in keys if k in t}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudySettings:
        data = dict(data)
        evaluation = EvaluationSettings(**data.pop("evaluation", {}))
        report = ReportSettings(**data.pop("report", {}))
        return cls(**data, evaluation=evaluation, report=report)

    def comparable(self) -> dict[str, Any]:
        """What must not change between invocations on one study directory: everything but the grid and report
        (adding algorithms or seeds keeps the budget; changing the budget would mix incomparable cells)."""
        data = self.to_dict()
        for key in ("algos", "seeds", "report", "algo_options", "offline_datasets", "variants", "keep_checkpoints",
                    "server_args", "replicates", "results"):
            data.pop(key)
        data["evaluation"].pop("max_concurrent", None)
        if not data["evaluation"]["at_steps"]:  # as before at_steps existed: older records and studies still match
            data["evaluation"].pop("at_steps")
        if not data["train_env_args"]:  # likewise
            data.pop("train_env_args")
        return data


TOP_KEYS = {f.name for f in dataclasses.fields(StudySettings)}


def read_settings_file(path: Path) -> dict[str, Any]:
    """A study TOML file as a dict of StudySettings fields (checked for unknown keys)."""
    data = read_toml(path, "study config", "configs/study/ in the rlvr repository", StudyError)
    check_keys(data, TOP_KEYS, str(path), StudyError)
    for table, cls in (("evaluation", EvaluationSettings), ("report", ReportSettings)):
        check_keys(data.get(table, {}), {f.name for f in dataclasses.fields(cls)}, f"[{table}] of {path}", StudyError)
    return data


def merge_grids(stored: StudySettings, current: StudySettings,
                finished: Collection[str] | None = None) -> StudySettings:
    """The settings of a study directory after this invocation: the budget must match what it was started with;
    the grid is the union (stored order first, replicates the larger), the report options are this invocation's.

    `finished`: the algorithms with a finished cell (None: every stored one); their options must not change. An
    algorithm whose cells all failed or never ran may change its options: its failed cells retry with the new ones."""
    old, new = stored.comparable(), current.comparable()
    changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    for algo in sorted(set(stored.algos) & set(current.algos) & set(stored.algos if finished is None else finished)):
        for table in ("algo_options", "offline_datasets", "variants"):
            before, after = getattr(stored, table).get(algo), getattr(current, table).get(algo)
            if before != after:
                changed.append(f"{table}.{algo}: {before!r} -> {after!r}")
    if changed:
        raise StudyError(
            "this study directory was started with other settings, and its cells must share one budget:\n  "
            + "\n  ".join(changed)
            + "\n  fix: run with the original settings (its study.json), or give a new --out directory")
    algos = stored.algos + [a for a in current.algos if a not in stored.algos]
    seeds = stored.seeds + [s for s in current.seeds if s not in stored.seeds]
    options = {**stored.algo_options, **current.algo_options}
    datasets = {**stored.offline_datasets, **current.offline_datasets}
    variants = {**stored.variants, **current.variants}
    return dataclasses.replace(current, algos=algos, seeds=seeds, algo_options=options, offline_datasets=datasets,
                               variants=variants, replicates=max(stored.replicates, current.replicates))
