"""The two game engines behind one interface: start a game, step it with a command, read an `Observation`.

alfworld: ALFWorld's own text engine, i.e. textworld's `PddlEnv` (fast-downward applies the PDDL actions, the
          `alfred.twl2` grammar writes the text) wrapped in ALFWorld's `AlfredDemangler` (object names such as
          `apple 1`). The chain is built here directly: alfworld 0.4.2's `AlfredTWEnv.init_env` passes the expert type
          where the environment goes, so the planner expert it asks for is silently replaced by the hand-coded one.
          The planner expert is textworld's own replanning (`EnvInfos(policy_commands=True)`), asked for only when a
          plan is wanted (generation, expert trajectories), since it replans on every step.
twc:      TextWorldExpress's TextWorld-Commonsense game (a Java simulator reached through py4j): put household
          objects where they belong. One simulator per process serves every episode; an episode is its seed plus
          the commands played so far, replayed when another episode used the simulator in between (0.4 ms a step).
          A JVM that dies or hangs is restarted (bounded, logged); the episode in its call fails, the others replay.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import itertools
import logging
import re
import shutil
import subprocess
import threading
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from py4j.protocol import Py4JError, Py4JJavaError

from rlvr.restarts import RestartBudget, RestartsSpent
from vf_alfworld.records import GameRecord
from vf_alfworld.tasks import Task, progress

# Facts that record what the agent looked at, not what the world is: left out of the anchor state.
OBSERVATION_ONLY_FACTS = frozenset({"checked", "examined"})
# textworld is not thread-safe: two games loading at once in different threads corrupt each other's grammar and
# logic parsing (tatsu errors, "pop from empty list"). Every textworld call of the process holds this lock; steps
# take milliseconds, so rollouts still interleave.
TEXTWORLD_LOCK = threading.Lock()
# ALFWorld's command for putting an object down: "put O in/on X" in the game files ALFWorld published (and in the
# ReAct prompts), "move O to X" in alfworld 0.4's grammar (generated games). Either form is played in the form the
# game accepts.
PUT_COMMAND = re.compile(r"^(?:put|move) (.{1,80}?) (?:in/on|in|on|into|onto|to) (.{1,80})$")
# Translated game files kept by the process (least recently used dropped first), see FastResetPddlEnv.
TRANSLATED_GAMES_KEPT = 64  # about 4 MB each for an official game
_TRANSLATED: OrderedDict = OrderedDict()


@dataclass(frozen=True)
class Observation:
    """What the game shows after a reset or a command, and what the rewards and GiGPO need to know about it.

    text: the game's own reply (ALFWorld's "Nothing happens." for a command it does not accept).
    admissible: the commands the game accepts now.
    won / failed: the goal is reached / the game declared the task failed (twc only); either ends the episode.
    progress: sub-goal progress of this state in [0, 1], 1.0 when won (alfworld: tasks.progress; twc: its score).
    state_key: a hash of the world state, equal for equal states of the same game (the GiGPO anchor state).
    valid: whether the command was among the admissible ones (True after a reset).
    """

    text: str
    admissible: tuple[str, ...]
    won: bool
    failed: bool
    progress: float
    state_key: str
    valid: bool = True


def _digest(*parts: str) -> str:
    return hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _copy_initial_state(initial, downward_lib):
    """A PddlState equal to `initial` (a translated game's first state) that can be played without changing it:
    the fact sets are copied, the translation and the action table are shared, and this engine's fast-downward
    library is given the task again."""
    state = copy.copy(initial)
    state.downward_lib = downward_lib
    state._facts = defaultdict(set, {k: set(v) for k, v in initial._facts.items()})
    state._vars_by_name = dict(initial._vars_by_name)
    state._vars_by_type = defaultdict(set, {k: set(v) for k, v in initial._vars_by_type.items()})
    state._var_counts = Counter(initial._var_counts)
    state.downward_lib.load_sas(initial.sas.encode("utf-8"))
    state.downward_lib.load_sas_replan(initial.sas_replan.encode("utf-8"))
    return state


def _pddl_env_class():
    from textworld.core import GameState
    from textworld.envs import PddlEnv

    class FastResetPddlEnv(PddlEnv):
        """textworld's PddlEnv, which parses the grammar and translates the PDDL problem with fast-downward's Python
        translator at every load and again at every reset (twice: the task and the planner's task): most of the
        time of a new episode. This one translates a game file once per process (`_TRANSLATED`, keyed by path:
        game files are never rewritten) and restores the translation at reset (`_copy_initial_state`); the rest of
        load and reset is PddlEnv's own (textworld/envs/pddl/pddl.py, textworld 1.7.0)."""

        def load(self, filename_or_data) -> None:
            key = filename_or_data if isinstance(filename_or_data, str) else None
            if key is not None and key in _TRANSLATED:
                _TRANSLATED.move_to_end(key)
                (self._game_data, self.walkthrough, self._logic, self._initial_state, self._entity_infos,
                 self._game_file) = _TRANSLATED[key]  # fmt: skip
                return
            super().load(filename_or_data)
            self._initial_state = self._pddl_state
            if key is not None:
                _TRANSLATED[key] = (self._game_data, self.walkthrough, self._logic, self._initial_state,
                                    self._entity_infos, self._game_file)  # fmt: skip
                while len(_TRANSLATED) > TRANSLATED_GAMES_KEPT:
                    _TRANSLATED.popitem(last=False)

        def reset(self):
            self._pddl_state = _copy_initial_state(self._initial_state, self.downward_lib)
            self.prev_state = None
            self.state = GameState()
            self._last_action = None
            self._moves = 0
            context = {"state": self._pddl_state, "facts": list(self._pddl_state.facts), "variables": {},
                       "mapping": {}, "entity_infos": self._entity_infos}  # fmt: skip
            self.state.feedback = self._logic.grammar.derive("#intro#", context)
            self.state.raw = self.state.feedback
            self._gather_infos()
            if "walkthrough" in self.request_infos.extras:
                self.state["extra.walkthrough"] = self.walkthrough or self._pddl_state.replan(self._entity_infos)
            return self.state

    return FastResetPddlEnv


def as_admissible(command: str, admissible) -> str:
    """`command`, or its other put form (PUT_COMMAND) when that is the one the game accepts."""
    found = None if command in admissible else PUT_COMMAND.match(command)
    if found:
        obj, receptacle = found.groups()
        for form in (f"move {obj} to {receptacle}", f"put {obj} in/on {receptacle}"):
            if form in admissible:
                return form
    return command


def same_but_for_case(command: str, admissible) -> str:
    """twc's admissible command that differs from `command` only in case, else `command`. twc's parser is
    case-sensitive and its names keep their case ("take clean blue T-shirt"), so commands are not lower-cased as
    ALFWorld's are; but "Take dirty plate" (SmolLM2-135M capitalises its actions) means the admissible one."""
    if command in admissible:
        return command
    lowered = command.lower()
    return next((form for form in admissible if form.lower() == lowered), command)


class AlfredGame:
    """One textworld PddlEnv, reused for game after game (each loads its own copy of fast-downward's library)."""

    def __init__(self, plan: bool = False):
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler

        infos = textworld.EnvInfos(won=True, admissible_commands=True, policy_commands=plan)
        with TEXTWORLD_LOCK:
            self._env = AlfredDemangler(_pddl_env_class()(infos))
        self._task: Task | None = None
        self._game_id = ""
        self._state = None

    def start(self, game_file: str | dict, task: Task, game_id: str) -> Observation:
        """Load a game (a game.tw-pddl path, or its parsed JSON) and reset it."""
        with TEXTWORLD_LOCK:
            self._env.load(game_file)
            self._task, self._game_id = task, game_id
            self._state = self._env.reset()
            return self._observe(valid=True)

    def step(self, command: str) -> Observation:
        with TEXTWORLD_LOCK:
            command = as_admissible(command, self._state["admissible_commands"])
            valid = command in self._state["admissible_commands"]
            self._state, _, _ = self._env.step(command)
            return self._observe(valid)

    def plan(self) -> list[str]:
        """The planner's commands from the current state to the goal ([] when it finds none)."""
        return list(self._state.get("policy_commands") or [])

    def _observe(self, valid: bool) -> Observation:
        facts = [(f.name, tuple(v.name for v in f.arguments)) for f in self._state["_facts"]]
        world = sorted(f"{name}({','.join(args)})" for name, args in facts if name not in OBSERVATION_ONLY_FACTS)
        won = bool(self._state["won"])
        return Observation(
            text=self._state.feedback.strip(),
            admissible=tuple(self._state["admissible_commands"]),
            won=won,
            failed=False,
            progress=progress(self._task, facts, won),
            state_key=f"{self._game_id}:{_digest(*world)}",
            valid=valid,
        )


# The planner replans at every step, so only generation and expert trajectories use it: one planning engine per
# process (`planner()`), held by one caller at a time for a whole game (PLANNER_LOCK).
PLANNER_LOCK = threading.Lock()


@functools.cache
def planner() -> AlfredGame:
    return AlfredGame(plan=True)


class AlfredEngines:
    """A pool of AlfredGames: one per concurrent episode, created on demand and reused."""

    name = "alfworld"

    def __init__(self):
        self._idle: list[AlfredGame] = []
        self._lock = threading.Lock()

    def start(self, record: GameRecord) -> tuple[AlfredGame, Observation]:
        with self._lock:
            game = self._idle.pop() if self._idle else None
        game = game or AlfredGame()
        return game, game.start(record.game_file, record.task, record.game_id)

    def step(self, game: AlfredGame, command: str) -> Observation:
        return game.step(command)

    def finish(self, game: AlfredGame) -> None:
        with self._lock:
            self._idle.append(game)


# --- TextWorldExpress ----------------------------------------------------------------------------------------------

# TextWorldExpress's folds; valid_seen / valid_unseen map to its dev / test folds (twc_objects.folds.json keeps
# some objects out of the training fold).
TWC_FOLDS = {"train": "train", "valid_seen": "dev", "valid_unseen": "test"}
TWC_DEFAULT_PARAMS = "numLocations=1,numItemsToPutAway=2,includeDoors=0,limitInventorySize=0"
# A simulator call takes milliseconds (a replay of 30 commands ~12 ms); a JVM silent this long is hung (a deadlock,
# a collector thrashing at its heap limit) and is killed.
TWC_CALL_TIMEOUT_S = 60.0


def require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise RuntimeError(
            "vf-alfworld backend='twc' needs a Java runtime (TextWorldExpress runs in the JVM through py4j), and "
            "`java` is not on PATH. Install one, e.g. `apt-get install -y default-jre-headless` (OpenJDK 17; "
            "scripts/setup.sh does this), or use backend='alfworld'."
        )
    return java


def _first_text(infos: dict) -> str:
    """twc's first observation is the room alone: put the task in front, as ALFWorld's intro does."""
    return f"{infos['taskDescription']}\n\n{infos['observation'].strip()}"


@dataclass
class TwcEpisode:
    number: int  # distinct for every episode of the process, to know whose game the simulator holds
    seed: int
    fold: str
    commands: list[str]


class TwcEngineError(RuntimeError):
    """The simulator failed this call (its JVM died or hung and was restarted, or its restarts are spent); the
    episode that made the call fails, later ones play on the new JVM."""


class TwcEngines:
    """One TextWorldExpress simulator for all episodes of this process, behind a lock.

    Every simulator call runs under a watchdog: a JVM silent for `call_timeout_s` is killed. A JVM that died (or was
    killed so) fails the call in flight with TwcEngineError (one failed rollout) and is replaced at once, within
    `restarts` (rlvr.restarts: bounded, one log line each); episodes that were not in the call go on, replayed from
    their commands on the new simulator (the same replay that interleaved episodes use).
    """

    name = "twc"

    def __init__(self, params: str = TWC_DEFAULT_PARAMS, step_limit: int = 10_000,
                 call_timeout_s: float = TWC_CALL_TIMEOUT_S, restarts: RestartBudget | None = None):  # fmt: skip
        require_java()
        self.params = params
        self.step_limit = step_limit  # episodes end by the env's own turn limit
        self.call_timeout_s = call_timeout_s
        self.restarts = restarts or RestartBudget("vf-alfworld: the TextWorldExpress JVM")
        self._lock = threading.Lock()
        self._sim = self._launch()
        self._current: tuple[int, int] | None = None  # (episode number, commands played) held by the simulator
        self._numbers = itertools.count()

    def _launch(self):
        from textworld_express import TextWorldExpressEnv

        # py4j logs every refused connection to a dead JVM with a traceback; the one line of `_replace` says it
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        sim = TextWorldExpressEnv(envStepLimit=self.step_limit)
        sim.load("twc", self.params)
        return sim

    @property
    def jvm(self) -> subprocess.Popen | None:
        """The simulator's Java process (None while it is down)."""
        return None if self._sim is None else self._sim._gateway.java_process

    def _call(self, action: Callable):
        """`action(simulator)` under the lock and the watchdog; a failed JVM is replaced and the call fails."""
        with self._lock:
            if self._sim is None:  # down since the restarts were spent: try again (the window may have passed)
                self._replace("is down")
            jvm, hung = self.jvm, threading.Event()

            def kill_hung() -> None:
                hung.set()
                jvm.kill()

            watchdog = threading.Timer(self.call_timeout_s, kill_hung)
            watchdog.daemon = True
            watchdog.start()
            try:
                return action(self._sim)
            except Py4JError as err:
                if isinstance(err, Py4JJavaError) and jvm.poll() is None and not hung.is_set():
                    raise  # an exception inside the simulator: the JVM is fine
                try:
                    code = jvm.wait(timeout=5)
                except subprocess.TimeoutExpired:  # alive, but its connection broke: treated as dead
                    jvm.kill()
                    code = jvm.wait()
                why = (f"(pid {jvm.pid}) did not answer within {self.call_timeout_s:g} s and was killed" if hung.is_set()
                       else f"(pid {jvm.pid}) died (exit code {code})")  # fmt: skip
                self._replace(why)
                raise TwcEngineError(f"the TextWorldExpress JVM {why} during this call; it was restarted") from None
            finally:
                watchdog.cancel()

    def _replace(self, why: str) -> None:
        """A new simulator in place of the failed one (under the lock), or None when the restarts are spent."""
        old, self._sim, self._current = self._sim, None, None
        if old is not None:
            old._gateway.java_process.kill()
            old._gateway.java_process.wait()
            with contextlib.suppress(Exception):
                old._gateway.shutdown_callback_server()
        try:
            self.restarts.spend(why)
        except RestartsSpent as spent:
            raise TwcEngineError(str(spent)) from None
        self._sim = self._launch()

    def seeds(self, split: str) -> list[int]:
        fold = TWC_FOLDS[split]

        def seeds_of(sim) -> list[int]:
            self._current = None
            return {"train": sim.getValidSeedsTrain, "dev": sim.getValidSeedsDev,
                    "test": sim.getValidSeedsTest}[fold]()  # fmt: skip

        return self._call(seeds_of)

    def gold_path(self, seed: int, split: str) -> tuple[str, str, list[str]]:
        """(task description, first observation, the simulator's gold command sequence) of a game."""

        def gold_of(sim) -> tuple[str, str, list[str]]:
            self._current = None
            obs, infos = sim.reset(seed=seed, gameFold=TWC_FOLDS[split], generateGoldPath=True)
            return infos["taskDescription"], _first_text(infos), list(sim.getGoldActionSequence())

        return self._call(gold_of)

    def start(self, record: GameRecord) -> tuple[TwcEpisode, Observation]:
        episode = TwcEpisode(next(self._numbers), record.seed, TWC_FOLDS[record.split], [])

        def start_on(sim) -> tuple[TwcEpisode, Observation]:
            self._current = None
            _, infos = sim.reset(seed=episode.seed, gameFold=episode.fold, generateGoldPath=False)
            self._current = (episode.number, 0)
            return episode, self._observe(episode, infos, _first_text(infos), valid=True)

        return self._call(start_on)

    def step(self, episode: TwcEpisode, command: str) -> Observation:
        def step_on(sim) -> Observation:
            if self._current != (episode.number, len(episode.commands)):
                self._current = None
                sim.reset(seed=episode.seed, gameFold=episode.fold, generateGoldPath=False)
                for previous in episode.commands:
                    sim.step(previous)
            admissible = sim.runHistory[-1]["validActions"]
            played = same_but_for_case(command, admissible)
            text, _, _, infos = sim.step(played)
            episode.commands.append(played)
            self._current = (episode.number, len(episode.commands))
            return self._observe(episode, infos, text, played in admissible)

        return self._call(step_on)

    def finish(self, episode: TwcEpisode) -> None:
        return None

    def _observe(self, episode: TwcEpisode, infos: dict, text: str, valid: bool) -> Observation:
        return Observation(
            text=text.strip(),
            admissible=tuple(sorted(infos["validActions"])),
            won=bool(infos["tasksuccess"]),
            failed=bool(infos["taskfailure"]),
            progress=min(1.0, max(0.0, float(infos["score"]))),
            # twc shows the whole room and the inventory: that is the state the agent acts on
            state_key=f"twc/{episode.fold}/{episode.seed}:{_digest(infos['look'], infos['inventory'])}",
            valid=valid,
        )
