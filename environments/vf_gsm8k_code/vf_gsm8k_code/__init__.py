"""vf-gsm8k-code: GSM8K word problems solved with a sandboxed Python tool (verl-tool's MT-GRPO recipe).

Turn reward for code that runs, outcome reward for the right answer; see rewards.py for the formulas and
protocols.py for the two ways the model calls the tool.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf

from rlvr.rubrics import TurnRubric
from rlvr.sandbox import SandboxConfig
from vf_gsm8k_code import data
from vf_gsm8k_code.protocols import NATIVE_SYSTEM_PROMPT, XML_SYSTEM_PROMPT, CodeXMLEnv, python_tool
from vf_gsm8k_code.rewards import code_execution_reward, correct_answer_reward

PROTOCOLS = ("xml", "native")


def load_environment(
    dataset: str = "synthetic",
    protocol: str = "xml",
    max_turns: int = 2,
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    seed: int = 0,
    data_path: str | None = None,
    sandbox: dict[str, Any] | None = None,
    **kwargs,
) -> vf.Environment:
    """dataset: "synthetic" (reasoning-gym gsm_symbolic) | "hf" (openai/gsm8k main) | "jsonl" (data_path);
    protocol: "xml" (<code> / <output>) | "native" (a `python` tool call); sandbox: SandboxConfig fields."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}: choose one of {list(PROTOCOLS)}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    train, eval_ = data.load(dataset, num_train_examples, num_eval_examples, seed, data_path)
    sandbox_config = SandboxConfig(**(sandbox or {}))

    parser = vf.XMLParser(["code", "answer"], answer_field="answer")
    rubric = TurnRubric(
        turn_rewards=[(code_execution_reward, 1.0)],
        outcome_rewards=[(correct_answer_reward, 1.0)],
        parser=parser,
    )
    common = dict(
        dataset=train, eval_dataset=eval_, rubric=rubric, parser=parser, max_turns=max_turns, **kwargs
    )
    if protocol == "xml":
        return CodeXMLEnv(sandbox=sandbox_config, system_prompt=XML_SYSTEM_PROMPT, **common)
    return vf.ToolEnv(
        tools=[python_tool(sandbox_config)],
        system_prompt=NATIVE_SYSTEM_PROMPT,
        # verl-tool's failure marker, so that a malformed call counts as a failed execution
        error_formatter=lambda e: f"Error: {e}",
        stop_errors=[vf.SandboxError],
        **common,
    )


__all__ = ["load_environment"]
