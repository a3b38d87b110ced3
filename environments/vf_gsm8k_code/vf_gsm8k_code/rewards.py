"""verl-tool's `gsm8k_code` rewards for MT-GRPO, as TurnRubric functions.

Source: verl-tool's reward manager verl_tool/workers/reward_manager/gsm8k_code.py (compute_turn_reward,
GSM8KCodeRewardManager; read in the verl-tool tree of vgandhi13/LLMAgentRLInterphyre at 0c0135f, as the index
holds no TIGER-AI-Lab copy of that file), itself after Multi-Turn-RL-Agent's code_execution_reward_func. Differences, on purpose:
- verl-tool scores all executions of a trajectory at once; TurnRubric calls the turn reward once per assistant
  turn, so a turn's reward is what it adds to the trajectory-level formula (identical when, as with max_turns=2,
  one turn executes code), and the 0.05-per-success term counts one success per rollout: turn rewards cannot be
  farmed by running code again and again (issue 21).
- verl-tool compares answers by normalised string / float; the issue asks for math-verify's equivalence, bounded
  in time (vf_gsm8k_code.answers).
- the final answer is looked for in assistant messages only, so a program cannot print "<answer>...".
"""

from __future__ import annotations

from rlvr.rubrics.rewards import earlier_turns, tool_results
from vf_gsm8k_code.answers import final_answer, numerically_equal

# verl-tool compute_turn_reward: an execution failed when its observation contains one of these or is empty.
FAILURE_MARKERS = ("Error:", "Traceback")  # case-sensitive there
FAILURE_MARKERS_ANY_CASE = ("timed out", "exception")  # compared lower-cased there
RATIO_WEIGHT, SUCCESS_BONUS = 0.3, 0.05  # compute_turn_reward: 0.3 x successful / valid + 0.05 x successful
MAX_REWARDED_SUCCESSES = 1  # successes that earn the bonus, per rollout (verl-tool counts all of them)
CORRECT, ANSWERED_WRONG, NO_ANSWER = 1.0, 0.1, 0.0  # GSM8KCodeRewardManager correct_reward / format_reward


def execution_failed(observation: str) -> bool:
    lowered = observation.lower()
    return (
        not observation.strip()
        or any(m in observation for m in FAILURE_MARKERS)
        or any(m in lowered for m in FAILURE_MARKERS_ANY_CASE)
    )


def execution_score(observations: list[str]) -> float:
    """verl-tool's compute_turn_reward over a rollout's executions, the bonus capped at MAX_REWARDED_SUCCESSES."""
    if not observations:
        return 0.0
    successful = sum(not execution_failed(o) for o in observations)
    return RATIO_WEIGHT * successful / len(observations) + SUCCESS_BONUS * min(successful, MAX_REWARDED_SUCCESSES)


def code_execution_reward(turn, env_reply, step=None, prompt=None, **kwargs) -> float:
    """Turn reward: what this turn's executions add to execution_score over the rollout's executions so far (the
    earlier turns' tool results, read from the step's prompt). Executions are "tool" messages (native calls) or the
    <output> of the environment's reply (XML). A rollout's turn rewards sum to execution_score of all its
    executions, in [0, 0.35]; one turn lies in [-0.3, 0.35] (a failure after a success lowers the ratio)."""
    before = [o for _, reply in earlier_turns(step, prompt) for o in tool_results(reply)]
    return execution_score(before + tool_results(env_reply)) - execution_score(before)


def correct_answer_reward(completion, answer, **kwargs) -> float:
    """Outcome reward: 1.0 when the final answer equals the gold one (math-verify, bounded), 0.1 when an answer was
    given but is wrong, 0 when there is none (GSM8KCodeRewardManager.__call__)."""
    prediction = final_answer(completion)
    if prediction is None:
        return NO_ANSWER
    return CORRECT if numerically_equal(prediction, str(answer)) else ANSWERED_WRONG
