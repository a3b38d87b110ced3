"""A scripted calculator expert: for each task, call `calculate` on the task's expression, read the tool's result,
answer `Answer: <result>`: the three-message path the harness plays (v1_calculator.harness), written as
trajectories that rlvr's SFT and OREO read (rlvr.offline.trajectories: predictions.jsonl, one record a line, with
the tool schema in `tools` so rlvr renders the prompt the model sees through the bridge, tools block included).

Runs in the bridge's interpreter (.venv-v1, verifiers 0.4: the taskset, its tool and its turn rewards are used
as they are); what it writes is plain JSON, so rlvr's interpreter trains on it without importing verifiers 0.4:

    .venv-v1/bin/python -m v1_calculator.expert OUT_DIR [-n 256] [--seed 1] [--max-terms 3] [--max-operand 99]
    rlvr train --algo sft --model smollm2-135m --dataset OUT_DIR ...

Messages are in the OpenAI shape the harness sends (the assistant's tool call with JSON-string arguments, the tool
reply with its call id), so the chat template renders them as the bridge's renderer (rlvr.v1.renderer) does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from verifiers.v1.types import AssistantMessage, ToolCall

from v1_calculator import tools
from v1_calculator.taskset import CalculatorConfig, CalculatorTaskset, final_answer, turn_reward

CALL_ID = "call_0"


def trajectory(task) -> dict:
    """One task's expert record: the call, the tool's reply and the answer, scored by the taskset's own rules."""
    data = task.data
    arguments = json.dumps({"expression": data.expression})
    result = tools.call("calculate", arguments)
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": CALL_ID, "type": "function", "function": {"name": "calculate", "arguments": arguments}}]}
    answer = {"role": "assistant", "content": f"Answer: {result}"}
    turn_rewards = [
        turn_reward(AssistantMessage(content="", tool_calls=[ToolCall(id=CALL_ID, name="calculate",
                                                                      arguments=arguments)]), data.answer),
        turn_reward(AssistantMessage(content=answer["content"]), data.answer)]
    correct = 1.0 if final_answer(answer["content"]) == data.answer else 0.0
    return {"example_id": data.idx, "prompt": [{"role": "user", "content": data.prompt}],
            "completion": [call, {"role": "tool", "tool_call_id": CALL_ID, "content": result}, answer],
            "tools": [tools.SCHEMA], "answer": str(data.answer), "num_turns": 2, "turn_rewards": turn_rewards,
            "reward": correct, "metrics": {"correct_answer": correct}, "stop_condition": "no_tools", "error": None,
            "steps": [[0, 0], [2, 0]], "segmentation": "turn",  # one step per assistant turn
            "task": "v1-calculator", "policy": "v1_calculator.expert", "sample_index": 0}


def write(out_dir: str | Path, config: CalculatorConfig) -> list[dict]:
    """Every task of the taskset `config` builds, as expert records in `out_dir`/predictions.jsonl (written to a
    temporary name and renamed, so a reader never sees half a file)."""
    records = [trajectory(task) for task in CalculatorTaskset(config)]  # iterating sets each idx
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "predictions.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(out / "predictions.jsonl")
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m v1_calculator.expert", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write predictions.jsonl into")
    parser.add_argument("-n", "--num-tasks", type=int, default=256, help="trajectories to write (one per task)")
    parser.add_argument("--seed", type=int, default=1,
                        help="the taskset's seed (1: other expressions than the default taskset's seed 0, which "
                             "rlvr trains and evaluates on)")
    parser.add_argument("--max-terms", type=int, default=3, help="operands per expression (2 to max-terms)")
    parser.add_argument("--max-operand", type=int, default=99, help="operands are 1 to max-operand")
    args = parser.parse_args(argv)
    try:
        config = CalculatorConfig(num_tasks=args.num_tasks, seed=args.seed, max_terms=args.max_terms,
                                  max_operand=args.max_operand)
        records = write(args.out_dir, config)
    except ValueError as e:
        print(f"v1_calculator.expert: {e}", file=sys.stderr)
        return 2
    right = sum(r["reward"] == 1.0 for r in records)
    print(f"{len(records)} expert trajectories ({right} right, 2 turns each, one calculate call) -> "
          f"{Path(args.out_dir) / 'predictions.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
