"""The model's final answer and a bounded comparison with the gold one.

Extraction follows verl-tool (verl_tool/workers/reward_manager/gsm8k_code.py, extract_final_answer): <answer>...
first, else the last \\boxed{...}, read from assistant messages only and outside their <code> blocks.

Comparison is math-verify's equivalence (the issue asked for it over verl-tool's string/float match), bounded
because a policy writes anything (issue 21: `<answer>10^10^10</answer>` made scoring hang for more than 30 s):
1. answers over MAX_ANSWER_CHARS, or holding a power tower, a large exponent, a factorial, a sum, product,
   binomial or integral, are refused without evaluation: they fall back to plain string equality (logged);
2. plain numbers on both sides (digits, a sign, thousands commas, a decimal point, a dollar sign) are compared
   by math-verify in this process: literals cannot blow up;
3. anything else goes to math-verify in a worker process with a time limit; a comparison that runs out of time
   kills the worker (a new one starts for the next comparison) and falls back to string equality (logged).
A worker that dies on its own (killed from outside, out of memory) fails the comparison in flight with WorkerDied,
which the reward function lets through: TurnRubric scores that rollout 0, logs it and counts it in `reward_errors`;
the worker is restarted for the next comparison (bounded and logged by rlvr.restarts).
"""

from __future__ import annotations

import atexit
import json
import logging
import re
import select
import subprocess
import sys
import threading
from pathlib import Path

from math_verify import parse, verify

from rlvr.restarts import RestartBudget, RestartsSpent
from rlvr.rubrics.parsing import message_text, tagged

logger = logging.getLogger(__name__)

MAX_ANSWER_CHARS = 100  # a GSM8K answer is a number
MAX_EXPONENT_DIGITS = 4  # 10^9999 is instant for sympy; exponents are not GSM8K answers anyway
COMPARE_TIMEOUT_S = 5.0
WORKER_START_TIMEOUT_S = 120.0  # python + sympy import, on a loaded machine
BOXED = re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")  # linear: the classes exclude the braces
PLAIN_NUMBER = re.compile(r"\s*\$?\s*[-+]?\d[\d,]*(?:\.\d*)?\s*")
POWER = re.compile(r"\^|\*\*")
EXPONENT = re.compile(r"(?:\^|\*\*)\s*\{?\s*[-+]?\s*(\d+)")
EXPENSIVE = re.compile(r"!|\\(?:binom|choose|prod|sum|int|lim)")


def extract_answer(text: str) -> str | None:
    """<answer>...</answer> first, else the last \\boxed{...} (verl-tool extract_final_answer)."""
    answer = tagged(text, "answer")
    if answer is not None:
        return answer
    boxed = BOXED.findall(text)
    return boxed[-1].strip() if boxed else None


def without_code(text: str) -> str:
    """The text outside its <code>...</code> blocks (a string the program would print is not an answer): what
    re.sub(r"<code>.*?</code>", "", text, flags=re.DOTALL) gives, in linear time (the regex is quadratic on many
    unclosed <code> tags)."""
    kept, position = [], 0
    while (start := text.find("<code>", position)) != -1:
        end = text.find("</code>", start + len("<code>"))
        if end == -1:
            break
        kept.append(text[position:start])
        position = end + len("</code>")
    kept.append(text[position:])
    return "".join(kept)


def final_answer(completion) -> str | None:
    """The answer in the last assistant message that has one, outside its <code> blocks."""
    messages = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        answer = extract_answer(without_code(message_text(message)))
        if answer is not None:
            return answer
    return None


def refusal(answer: str) -> str | None:
    """Why an answer is compared as text only (not evaluated), or None when math-verify may read it."""
    if len(answer) > MAX_ANSWER_CHARS:
        return f"longer than {MAX_ANSWER_CHARS} characters"
    if len(POWER.findall(answer)) > 1:
        return "more than one power (a power tower)"
    if any(len(e) > MAX_EXPONENT_DIGITS for e in EXPONENT.findall(answer)):
        return f"an exponent of more than {MAX_EXPONENT_DIGITS} digits"
    if EXPENSIVE.search(answer):
        return "a factorial, sum, product, binomial, integral or limit"
    return None


def same_text(prediction: str, gold: str) -> bool:
    """The fallback comparison: equal after dropping spaces, dollar signs, thousands commas and a final period."""

    def bare(s: str) -> str:
        return re.sub(r"[\s$,]", "", s).rstrip(".")

    return bare(prediction) == bare(gold)


def _math_verify(gold: str, prediction: str) -> bool:
    return bool(verify(parse(gold, parsing_timeout=None), parse(prediction, parsing_timeout=None), timeout_seconds=None))


class ComparisonFailed(RuntimeError):
    """The worker could not compare in time (and was killed); the message says why."""


class WorkerDied(RuntimeError):
    """The worker died on its own during a comparison (or cannot be restarted): that rollout's score fails."""


class MathVerifyWorker:
    """math-verify in a child process (math_verify_worker.py), started on first use and killed when a comparison
    runs past its time limit: the only way to stop sympy inside one C call. One comparison at a time."""

    def __init__(self, timeout_s: float = COMPARE_TIMEOUT_S):
        self.timeout_s = timeout_s
        self.restarts = RestartBudget("vf-gsm8k-code: the math-verify worker")
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        atexit.register(self.close)

    def equal(self, gold: str, prediction: str) -> bool:
        with self._lock:
            process = self._started()
            assert process.stdin is not None
            try:
                process.stdin.write(json.dumps([gold, prediction]).encode() + b"\n")
                process.stdin.flush()
                line = self._read_line(process, self.timeout_s)
            except OSError:
                line = b""  # its pipe broke: it is gone
            if line == b"":  # left for `_started` to account and replace
                code = process.wait()
                raise WorkerDied(f"the math-verify worker (pid {process.pid}) died (exit code {code}) while comparing "
                                 f"{prediction!r} with {gold!r}")
            if line is None:
                self.close()
                raise ComparisonFailed(f"math-verify took longer than {self.timeout_s:g} s (worker killed)")
            reply = json.loads(line)
            if "error" in reply:
                logger.info(f"math-verify could not compare {prediction!r} with {gold!r}: {reply['error']}")
            return bool(reply["equal"])

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def _started(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is not None:  # died on its own, not killed by us
            dead, self._process = self._process, None
            try:
                self.restarts.spend(f"(pid {dead.pid}) died (exit code {dead.returncode})")
            except RestartsSpent as spent:
                self._process = dead  # still down: the next comparison asks the budget again
                raise WorkerDied(str(spent)) from None
        if self._process is None:
            worker = Path(__file__).with_name("math_verify_worker.py")
            self._process = subprocess.Popen([sys.executable, str(worker)], stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if self._read_line(self._process, WORKER_START_TIMEOUT_S) != b"ready\n":
                self.close()
                raise ComparisonFailed("the math-verify worker did not start")
        return self._process

    @staticmethod
    def _read_line(process: subprocess.Popen, timeout_s: float) -> bytes | None:
        """One line from the worker, None if none came within `timeout_s`, b"" if the worker exited."""
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout_s)
        if not ready:
            return None
        return process.stdout.readline()


WORKER = MathVerifyWorker()


def numerically_equal(prediction: str, gold: str) -> bool:
    """Whether the prediction equals the gold answer, in bounded time (module docstring). Raises WorkerDied when
    the worker died during the comparison: the rollout is scored as failed, not as wrong."""
    if reason := refusal(prediction):
        logger.info(f"answer {prediction[:60]!r} is {reason}: compared as text, not evaluated")
        return same_text(prediction, gold)
    if PLAIN_NUMBER.fullmatch(prediction) and PLAIN_NUMBER.fullmatch(gold):
        return _math_verify(gold, prediction)
    try:
        return WORKER.equal(gold, prediction)
    except ComparisonFailed as e:
        logger.warning(f"answer {prediction!r} vs {gold!r}: {e}; compared as text")
        return same_text(prediction, gold)
