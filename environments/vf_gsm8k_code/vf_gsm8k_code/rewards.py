"""verl-tool's `gsm8k_code` rewards for MT-GRPO, as TurnRubric functions.

Source: verl-tool's reward manager verl_tool/workers/reward_manager/gsm8k_code.py (compute_turn_reward,
GSM8KCodeRewardManager; read in the verl-tool tree of vgandhi13/LLMAgentRLInterphyre at 0c0135f, as the index
holds no TIGER-AI-Lab copy of that file), itself after Multi-Turn-RL-Agent's code_execution_reward_func. Differences, on purpose:
- verl-tool scores all executions of a trajectory at once; TurnRubric calls the turn reward once per assistant
  turn, so the formula is applied to that turn's executions (identical when, as with max_turns=2, at most one
  turn executes code).
- verl-tool compares answers by normalised string / float; the issue asks for math-verify's equivalence.
- the final answer is looked for in assistant messages only, so a program cannot print "<answer>...".
"""

from __future__ import annotations

import re

from math_verify import parse, verify

from rlvr.rubrics.rewards import message_text, tagged, tool_results

# verl-tool compute_turn_reward: an execution failed when its observation contains one of these or is empty.
FAILURE_MARKERS = ("Error:", "Traceback")  # case-sensitive there
FAILURE_MARKERS_ANY_CASE = ("timed out", "exception")  # compared lower-cased there
CORRECT, ANSWERED_WRONG, NO_ANSWER = 1.0, 0.1, 0.0  # GSM8KCodeRewardManager correct_reward / format_reward
# math-verify's timeouts use SIGALRM, which only works in the main thread; we switch them off and instead bound
# the input, which is what makes sympy parsing slow. A GSM8K answer is a number.
MAX_ANSWER_CHARS = 100
BOXED = re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
CODE_BLOCK = re.compile(r"<code>.*?</code>", re.DOTALL)


def execution_failed(observation: str) -> bool:
    lowered = observation.lower()
    return (
        not observation.strip()
        or any(m in observation for m in FAILURE_MARKERS)
        or any(m in lowered for m in FAILURE_MARKERS_ANY_CASE)
    )


def code_execution_reward(turn, env_reply, **kwargs) -> float:
    """Turn reward: 0.3 x successful / valid executions + 0.05 x successful executions (verl-tool
    compute_turn_reward); 0 for a turn that executed nothing. Executions are the turn's tool results:
    "tool" messages (native calls) or the <output> of the environment's reply (XML)."""
    observations = tool_results(env_reply)
    if not observations:
        return 0.0
    successful = sum(not execution_failed(o) for o in observations)
    return 0.3 * successful / len(observations) + 0.05 * successful


def extract_answer(text: str) -> str | None:
    """<answer>...</answer> first, else the last \\boxed{...} (verl-tool extract_final_answer)."""
    answer = tagged(text, "answer")
    if answer is not None:
        return answer
    boxed = BOXED.findall(text)
    return boxed[-1].strip() if boxed else None


def final_answer(completion) -> str | None:
    """The answer in the last assistant message that has one, outside its <code> blocks (a string the
    program would print is not an answer)."""
    messages = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
    for message in reversed(messages):
        if message.get("role") != "assistant":
            continue
        answer = extract_answer(CODE_BLOCK.sub("", message_text(message)))
        if answer is not None:
            return answer
    return None


def numerically_equal(prediction: str, gold: str) -> bool:
    if len(prediction) > MAX_ANSWER_CHARS:
        return False
    return verify(
        parse(gold, parsing_timeout=None), parse(prediction, parsing_timeout=None), timeout_seconds=None
    )


def correct_answer_reward(completion, answer, **kwargs) -> float:
    """Outcome reward: 1.0 when the final answer equals the gold one (math-verify), 0.1 when an answer was given
    but is wrong, 0 when there is none (GSM8KCodeRewardManager.__call__)."""
    prediction = final_answer(completion)
    if prediction is None:
        return NO_ANSWER
    return CORRECT if numerically_equal(prediction, str(answer)) else ANSWERED_WRONG
