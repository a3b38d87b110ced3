"""Run by tests/v1/test_calculator_expert.py in the bridge's interpreter (.venv-v1): v1-calculator's expert writes
its trajectories, and each assistant turn of each is rendered as the bridge renders it for the model: the messages
the harness would send at that turn, parsed by verifiers' chat dialect and turned back into wire messages and
tools as verifiers' train client does (verifiers/v1/clients/train.py, TrainClient.get_response), rendered by
rlvr's renderer (rlvr.v1.renderer, loaded by its import path as the worker names it) with a generation prompt.
The turn's completion tokens (up to the end-of-turn token, as the model would sample them) are parsed back with
the same renderer. Prints one JSON line.

    calculator_expert_cases.py OUT_DIR MODEL_PATH RENDERER_IMPORT_PATH
"""

from __future__ import annotations

import json
import sys

from renderers import create_renderer
from renderers.base import load_tokenizer
from renderers.configs import CustomRendererConfig
from v1_calculator.expert import write
from v1_calculator.taskset import CalculatorConfig
from verifiers.v1.clients.train import tool_to_wire
from verifiers.v1.dialects import ChatDialect
from verifiers.v1.dialects.chat import message_to_wire


def bridge_render(renderer, messages: list[dict], tools: list[dict], generation_prompt: bool) -> list[int]:
    request = ChatDialect().parse_request({"model": "m", "messages": messages, "tools": tools})
    wire_tools = [tool_to_wire(t) for t in request.tools] if request.tools else None
    wire = [message_to_wire(m) for m in request.messages]
    return list(renderer.render(wire, tools=wire_tools, add_generation_prompt=generation_prompt).token_ids)


def main(out_dir: str, model_path: str, renderer_path: str) -> None:
    records = write(out_dir, CalculatorConfig(num_tasks=6, seed=3, max_terms=3, max_operand=99))
    renderer = create_renderer(load_tokenizer(model_path), CustomRendererConfig(import_path=renderer_path))
    stop = set(renderer.get_stop_token_ids())
    cases = []
    for record in records:
        messages = record["prompt"] + record["completion"]
        turns = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt_ids = bridge_render(renderer, messages[:i], record["tools"], generation_prompt=True)
            through = bridge_render(renderer, messages[: i + 1], record["tools"], generation_prompt=False)
            assert through[: len(prompt_ids)] == prompt_ids, "the template re-renders an earlier turn"
            completion = through[len(prompt_ids):]
            end = next(k for k, t in enumerate(completion) if t in stop)
            completion = completion[: end + 1]  # the model's sample ends at its end-of-turn token
            parsed = renderer.parse_response(completion, prompt_ids=prompt_ids)
            turns.append({"prompt_ids": prompt_ids, "completion_ids": completion, "content": parsed.content,
                          "tool_calls": [{"name": c.name, "arguments": c.arguments, "status": c.status.value}
                                         for c in parsed.tool_calls]})
        cases.append({"example_id": record["example_id"], "turns": turns})
    print(json.dumps({"cases": cases}))


if __name__ == "__main__":
    main(*sys.argv[1:4])
