"""The credit suite's text protocol: a task of `rlvr.suite.tasks` played by a language model, turn by turn.

One definition for both LLM-tier environments, which are adapters over it: vf-credit-suite
(environments/vf_credit_suite, verifiers 0.1.9) and its v1 port v1-credit-suite (environments_v1/v1_credit_suite,
verifiers 0.4, whose interpreter has rlvr without its dependencies). So this module imports the standard library
and `rlvr.suite.tasks` only. The golden cases (tests/v1/data/credit_suite_golden.json) check both environments.

The protocol, for models as small as tiny-random and SmolLM2-135M:
  - the system prompt is the task's rules plus "Reply with one action word.";
  - every observation is one line, the state's text and `Actions: A, B.`; a reply that is a tool result (the task's
    `Branch.result`, MT-GRPO's split point) starts that line with `Result: `; on the long-reply task the line
    follows a filler line of the task's `reply_tokens[k]` words ("the the ...", one token each in the SmolLM2
    tokenizer both rlvr models use), so the environment's tokens between turns grow without new information;
  - the action is the first word of the reply (a maximal run of letters, digits or `_`) that names an allowed
    action, case-insensitively (so the article "a" says action A);
  - a reply naming no allowed action spends the turn: the state stays, the turn reward is 0, it is no tool result,
    and the next observation starts with `Invalid reply.` (on the last turn the episode ends in that state, whose
    outcome is 0 for every non-terminal state of the suite). `rlvr.suite.tasks` has no invalid actions (its
    tabular policies only choose allowed ones), so this rule is the LLM tier's own.
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


def system_prompt(task: Task) -> str:
    return task.prompt + SYSTEM_SUFFIX


def parse_action(text: str | None, actions: tuple[str, ...]) -> str | None:
    """The first word of `text` that names one of `actions` (case-insensitive), as the action is spelled; None
    when no word does. One pass over the words: linear in the text."""
    allowed = {a.casefold(): a for a in actions}
    for word in _WORD.finditer(text or ""):
        found = allowed.get(word.group().casefold())
        if found is not None:
            return found
    return None


def filler(tokens: int) -> str:
    """`tokens` filler words (one token each), or '' for 0."""
    return " ".join([FILLER_WORD] * tokens)


def observation(task: Task, state: str, *, result: bool = False, invalid: bool = False, filler_tokens: int = 0) -> str:
    """What the model reads about `state`: [filler line] then [Result: ][Invalid reply. ]text[ Actions: ...]."""
    s = task.state(state)
    line = (RESULT_PREFIX if result else "") + (INVALID_PREFIX if invalid else "") + s.text
    if not s.terminal:
        line += f" Actions: {', '.join(s.actions)}."
    return f"{filler(filler_tokens)}\n{line}" if filler_tokens else line


def is_result(observation_text: str) -> bool:
    """Whether an observation answers a tool result: its last line (after any filler) starts with `Result: `."""
    return observation_text[observation_text.rfind("\n") + 1 :].startswith(RESULT_PREFIX)


@dataclass(frozen=True)
class Turn:
    state: str  # the state the turn acted on (GiGPO's anchor key)
    action: str | None  # None: the reply named no allowed action
    reward: float
    result: bool  # the environment's reply is a tool result
    next_state: str
    reply: str  # the environment's answer: the next observation
    done: bool


@dataclass
class Play:
    """A task from its start, its stochastic transitions drawn from `seed` as `rlvr.suite.tasks.rollout(task, ...,
    seed)` draws them (so the rollouts of one seed face the same draws for the same actions)."""

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
        """One turn: the task's own step for the action the reply names; a reply naming none spends the turn in
        place (reward 0, no tool result, `Invalid reply.`), ending the episode on the last turn."""
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
                                 filler_tokens=0 if done else self.task.reply_tokens[k])
        turn = Turn(acted_on, action, float(reward), result, next_state, reply_text, done)
        self.turns.append(turn)
        return turn


def replay(task: Task, seed: int, replies: list[str | None]) -> Play:
    """The episode the replies played from `seed` (a reply past its end is an error)."""
    play = Play(task, seed)
    for reply in replies:
        play.act(reply)
    return play
