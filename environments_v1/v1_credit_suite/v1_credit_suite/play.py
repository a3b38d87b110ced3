"""One credit-suite episode as text, turn by turn: what the model reads and how its reply moves the task.

The same protocol as vf-credit-suite (environments/vf_credit_suite/vf_credit_suite/env.py, verifiers 0.1.9),
written here because that module imports verifiers 0.1.9 and cannot load beside verifiers 0.4; the shared golden
cases (tests/v1/data/credit_suite_golden.json) hold both to the same observations, turn rewards, anchor states and
outcomes. The task itself (states, transitions, seeded draws) is rlvr.suite.tasks, shared by both.

`Play` is used twice: live by the harness (each reply gives the next observation) and again by the task's scoring,
which replays the trace's replies from the task's seed, so rewards depend only on what the model said.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from rlvr.suite.tasks import Task, step

SYSTEM_SUFFIX = " Reply with one action word."
RESULT_PREFIX = "Result: "
INVALID_PREFIX = "Invalid reply. "
FILLER_WORD = "the"  # one token per word in the SmolLM2 tokenizer (vf-credit-suite's tests count them)

_WORD = re.compile(r"\w+")


def parse_action(text: str | None, actions: tuple[str, ...]) -> str | None:
    """The first word (a maximal run of \\w) of `text` naming one of `actions`, case-insensitively, spelled as the
    action is; None when no word does."""
    allowed = {a.casefold(): a for a in actions}
    return next((allowed[w.group().casefold()] for w in _WORD.finditer(text or "")
                 if w.group().casefold() in allowed), None)


def observation(task: Task, state: str, *, result: bool = False, invalid: bool = False, filler: int = 0) -> str:
    """[`filler` filler words, newline] [Result: ][Invalid reply. ]<state text>[ Actions: A, B.]"""
    shown = task.state(state)
    line = (RESULT_PREFIX if result else "") + (INVALID_PREFIX if invalid else "") + shown.text
    if shown.actions:
        line += f" Actions: {', '.join(shown.actions)}."
    return " ".join([FILLER_WORD] * filler) + "\n" + line if filler else line


@dataclass(frozen=True)
class Turn:
    state: str  # the state the turn acted on (GiGPO's anchor key)
    action: str | None  # None: the reply named no allowed action
    reward: float
    reply: str  # the environment's answer: the next observation
    done: bool


@dataclass
class Play:
    """A task from its start, its stochastic transitions drawn from `seed` (as rlvr.suite.tasks.rollout draws)."""

    task: Task
    seed: int
    state: str = field(init=False)
    turns: list[Turn] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.state = self.task.start
        self._rng = random.Random(self.seed)

    @property
    def done(self) -> bool:
        return bool(self.turns) and self.turns[-1].done

    @property
    def outcome(self) -> float:
        """The outcome of the state the episode is in (0 until a rewarding terminal state)."""
        return float(self.task.state(self.state).outcome)

    def act(self, reply: str | None) -> Turn:
        """One turn. A reply naming no allowed action spends the turn in place: reward 0, no tool result, the next
        observation says `Invalid reply.` (vf-credit-suite's rule for the LLM tier)."""
        if self.done:
            raise ValueError(f"task {self.task.name!r}: the episode ended after {len(self.turns)} turn(s)")
        k, acted_on = len(self.turns), self.state
        action = parse_action(reply, self.task.state(acted_on).actions)
        if action is None:
            next_state, reward, result, done = acted_on, 0.0, False, k == self.task.turns - 1
        else:
            moved = step(self.task, acted_on, k, action, self._rng)
            next_state, reward, result, done = moved.next_state, moved.reward, moved.result, moved.done
        self.state = next_state
        reply_text = observation(self.task, next_state, result=result, invalid=action is None,
                                 filler=0 if done else self.task.reply_tokens[k])
        turn = Turn(acted_on, action, float(reward), reply_text, done)
        self.turns.append(turn)
        return turn


def replay(task: Task, seed: int, replies: list[str | None]) -> Play:
    """The episode the replies played (replies past its end are an error: the harness never asks for them)."""
    play = Play(task, seed)
    for reply in replies:
        play.act(reply)
    return play
